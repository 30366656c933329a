import { describe, expect, test } from "bun:test";
import { escapeHelp, escapeLabelValue, formatValue, MetricsRegistry } from "../../src/2-services/metrics/registry";
import { parseExposition } from "../helpers/prometheus";

describe("exposition", () => {
  test("counters and gauges render HELP, TYPE and one line per series, in order", () => {
    const r = new MetricsRegistry();
    const c = r.counter("app_requests_total", "Requests.", ["route", "status"]);
    const g = r.gauge("app_temperature_celsius", "Heat.");
    c.inc({ route: "/a", status: 200 });
    c.inc({ route: "/a", status: 200 }, 2);
    c.inc({ status: "404", route: "unmatched" });
    g.set({}, -1.5);
    expect(r.render()).toBe(
      [
        "# HELP app_requests_total Requests.",
        "# TYPE app_requests_total counter",
        'app_requests_total{route="/a",status="200"} 3',
        'app_requests_total{route="unmatched",status="404"} 1',
        "# HELP app_temperature_celsius Heat.",
        "# TYPE app_temperature_celsius gauge",
        "app_temperature_celsius -1.5",
        "",
      ].join("\n"),
    );
  });

  test("an unlabelled metric renders 0 before its first use; a labelled one renders no sample", () => {
    const r = new MetricsRegistry();
    r.counter("a_total", "A.");
    r.gauge("b", "B.", ["x"]);
    expect(r.render()).toBe("# HELP a_total A.\n# TYPE a_total counter\na_total 0\n# HELP b B.\n# TYPE b gauge\n");
  });

  test("histogram buckets are cumulative, end at +Inf, then _sum and _count", () => {
    const r = new MetricsRegistry();
    const h = r.histogram("op_seconds", "Op time.", ["op"], [0.1, 1, 5]);
    for (const v of [0.05, 0.1, 0.5, 2, 7]) h.observe({ op: "x" }, v);
    expect(r.render()).toBe(
      [
        "# HELP op_seconds Op time.",
        "# TYPE op_seconds histogram",
        'op_seconds_bucket{op="x",le="0.1"} 2',
        'op_seconds_bucket{op="x",le="1"} 3',
        'op_seconds_bucket{op="x",le="5"} 4',
        'op_seconds_bucket{op="x",le="+Inf"} 5',
        'op_seconds_sum{op="x"} 9.65',
        'op_seconds_count{op="x"} 5',
        "",
      ].join("\n"),
    );
    expect(h.count({ op: "x" })).toBe(5);
  });

  test("an unlabelled histogram has only le on its buckets", () => {
    const r = new MetricsRegistry();
    r.histogram("wait_seconds", "Wait.", [], [1]).observe({}, 3);
    expect(r.render()).toContain('wait_seconds_bucket{le="1"} 0\nwait_seconds_bucket{le="+Inf"} 1\nwait_seconds_sum 3\nwait_seconds_count 1\n');
  });

  test("label values escape backslash, double quote and line feed; HELP escapes backslash and line feed", () => {
    expect(escapeLabelValue('a\\b"c\nd')).toBe('a\\\\b\\"c\\nd');
    expect(escapeHelp('a\\b"c\nd')).toBe('a\\\\b"c\\nd');
    const r = new MetricsRegistry();
    r.gauge("g", 'Says "hi"\\\nthere.', ["v"]).set({ v: 'x"\\\ny' }, 1);
    const text = r.render();
    expect(text).toBe('# HELP g Says "hi"\\\\\\nthere.\n# TYPE g gauge\ng{v="x\\"\\\\\\ny"} 1\n');
    expect(parseExposition(text).samples[0]!.labels.v).toBe('x"\\\ny');
  });

  test("values: integers plain, floats shortest, infinities and NaN spelled as the format wants", () => {
    expect([1, 0.25, 1e21, 1e-7, Infinity, -Infinity, NaN].map(formatValue)).toEqual(["1", "0.25", "1e+21", "1e-7", "+Inf", "-Inf", "NaN"]);
  });

  test("labels given to render are on every sample, after the series' own and before le (a cluster node's node label)", () => {
    const r = new MetricsRegistry();
    r.counter("c_total", "C.", ["a"]).inc({ a: "1" });
    r.gauge("g", "G.").set({}, 2);
    r.histogram("h_seconds", "H.", ["a"], [1]).observe({ a: "q" }, 0.5);
    const text = r.render({ node: 'n"1' });
    expect(text).toContain('c_total{a="1",node="n\\"1"} 1\n');
    expect(text).toContain('g{node="n\\"1"} 2\n');
    expect(text).toContain('h_seconds_bucket{a="q",node="n\\"1",le="1"} 1\nh_seconds_bucket{a="q",node="n\\"1",le="+Inf"} 1\nh_seconds_sum{a="q",node="n\\"1"} 0.5\n');
    expect(parseExposition(text).value("g", { node: 'n"1' })).toBe(2);
    expect(() => r.render({ a: "x" })).toThrow("invalid constant label: a");
    expect(() => r.render({ le: "x" })).toThrow("invalid constant label: le");
    expect(r.render({})).toBe(r.render());
  });

  test("what renders parses as valid exposition", () => {
    const r = new MetricsRegistry();
    r.counter("c_total", "C.", ["a"]).inc({ a: "1" });
    r.histogram("h_seconds", "H.", ["a"], [0.5, 1]).observe({ a: "q" }, 0.7);
    const e = parseExposition(r.render());
    expect(e.types.get("h_seconds")).toBe("histogram");
    expect(e.value("h_seconds_bucket", { a: "q", le: "1" })).toBe(1);
  });
});

describe("misuse is refused", () => {
  test("a counter name must end in _total, and a counter only goes up", () => {
    const r = new MetricsRegistry();
    expect(() => r.counter("requests", "R.")).toThrow("_total");
    expect(() => r.counter("x_total", "X.").inc({}, -1)).toThrow("only goes up");
  });

  test("labels must be exactly the declared ones", () => {
    const c = new MetricsRegistry().counter("x_total", "X.", ["a"]);
    expect(() => c.inc({})).toThrow('label "a" is missing');
    expect(() => c.inc({ a: "1", b: "2" })).toThrow("exactly a");
  });

  test("bad names, a reserved le label, unordered buckets and duplicates", () => {
    const r = new MetricsRegistry();
    expect(() => r.gauge("bad-name", "B.")).toThrow("invalid metric name");
    expect(() => r.gauge("g", "G.", ["__x"])).toThrow("invalid label name");
    expect(() => r.histogram("h", "H.", ["le"], [1])).toThrow("invalid label name");
    expect(() => r.histogram("h2", "H.", [], [1, 1])).toThrow("strictly increasing");
    r.gauge("dup", "D.");
    expect(() => r.gauge("dup", "D.")).toThrow("already registered");
  });

  test("reset drops a gauge's series", () => {
    const r = new MetricsRegistry();
    const g = r.gauge("g", "G.", ["x"]);
    g.set({ x: "a" }, 1);
    g.reset();
    expect(r.render()).toBe("# HELP g G.\n# TYPE g gauge\n");
  });
});
