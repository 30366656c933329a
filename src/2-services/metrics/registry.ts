// A tiny Prometheus registry: counters, gauges and fixed-bucket histograms, rendered in the text
// exposition format 0.0.4 (https://prometheus.io/docs/instrumenting/exposition_formats/).
// Pure: no clock, no I/O. Label names are fixed per metric, so a metric's series are bounded by
// the values callers pass — callers pass only bounded values (route patterns, config model ids).

export const CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

export type Labels = Readonly<Record<string, string | number>>;
export type MetricType = "counter" | "gauge" | "histogram";

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

/** HELP text: backslash and line feed are escaped (the format's rule for docstrings). */
export function escapeHelp(s: string): string {
  return s.replace(/\\/g, "\\\\").replace(/\n/g, "\\n");
}

/** Label values: backslash, double quote and line feed are escaped. */
export function escapeLabelValue(s: string): string {
  return s.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}

/** Sample values as Go's ParseFloat reads them: +Inf, -Inf, NaN, else the shortest decimal. */
export function formatValue(v: number): string {
  if (Number.isNaN(v)) return "NaN";
  if (v === Infinity) return "+Inf";
  if (v === -Infinity) return "-Inf";
  return String(v);
}

/**
 * A sample's labels: its own, then the labels every series of the render carries (`constant`:
 * a cluster node's `node`), then a histogram bucket's `le`.
 */
function labelText(names: readonly string[], values: readonly string[], constant: readonly [string, string][] = [], extra?: [string, string]): string {
  const parts = names.map((n, i) => `${n}="${escapeLabelValue(values[i]!)}"`);
  for (const [n, v] of constant) parts.push(`${n}="${escapeLabelValue(v)}"`);
  if (extra) parts.push(`${extra[0]}="${escapeLabelValue(extra[1])}"`);
  return parts.length ? `{${parts.join(",")}}` : "";
}

/** Labels added to every sample of a render, as pairs; refused when a family has a label of that name. */
function constantPairs(family: { name: string; labelNames: readonly string[] }, constant: Labels): [string, string][] {
  return Object.entries(constant).map(([n, v]) => {
    if (!LABEL_NAME.test(n) || n.startsWith("__") || n === "le" || family.labelNames.includes(n)) throw new Error(`${family.name}: invalid constant label: ${n}`);
    return [n, String(v)];
  });
}

abstract class Family<C> {
  private readonly children = new Map<string, { values: string[]; child: C }>();

  constructor(
    readonly name: string,
    readonly help: string,
    readonly type: MetricType,
    readonly labelNames: readonly string[],
  ) {
    if (!METRIC_NAME.test(name)) throw new Error(`invalid metric name: ${name}`);
    for (const l of labelNames)
      if (!LABEL_NAME.test(l) || l.startsWith("__") || (type === "histogram" && l === "le")) throw new Error(`${name}: invalid label name: ${l}`);
  }

  protected abstract make(): C;

  protected child(labels: Labels): C {
    const values = this.labelNames.map((n) => {
      const v = labels[n];
      if (v === undefined) throw new Error(`${this.name}: label "${n}" is missing`);
      return String(v);
    });
    if (Object.keys(labels).length !== this.labelNames.length)
      throw new Error(`${this.name}: labels must be exactly ${this.labelNames.join(", ") || "none"}`);
    const key = values.join("\u0000");
    let entry = this.children.get(key);
    if (!entry) {
      entry = { values, child: this.make() };
      this.children.set(key, entry);
    }
    return entry.child;
  }

  /** Drops every series (scrape-time gauges whose label sets come and go). */
  reset(): void {
    this.children.clear();
  }

  protected series(): { values: string[]; child: C }[] {
    // An unlabelled metric always has its one series, so it renders (as 0) before its first use.
    if (this.labelNames.length === 0) this.child({});
    return [...this.children.values()];
  }

  protected abstract sampleLines(values: string[], child: C, constant: [string, string][]): string[];

  /** The family's text; `constant`: labels every sample carries besides its own. */
  render(constant: Labels = {}): string {
    const pairs = constantPairs(this, constant);
    const lines = [`# HELP ${this.name} ${escapeHelp(this.help)}`, `# TYPE ${this.name} ${this.type}`];
    for (const { values, child } of this.series()) lines.push(...this.sampleLines(values, child, pairs));
    return lines.join("\n") + "\n";
  }
}

export class Counter extends Family<{ v: number }> {
  constructor(name: string, help: string, labelNames: readonly string[] = []) {
    if (!name.endsWith("_total")) throw new Error(`counter ${name}: counter names end in _total`);
    super(name, help, "counter", labelNames);
  }
  protected make() {
    return { v: 0 };
  }
  inc(labels: Labels = {}, by = 1): void {
    if (!(by >= 0)) throw new Error(`${this.name}: a counter only goes up (got ${by})`);
    this.child(labels).v += by;
  }
  get(labels: Labels = {}): number {
    return this.child(labels).v;
  }
  protected sampleLines(values: string[], c: { v: number }, constant: [string, string][]) {
    return [`${this.name}${labelText(this.labelNames, values, constant)} ${formatValue(c.v)}`];
  }
}

export class Gauge extends Family<{ v: number }> {
  constructor(name: string, help: string, labelNames: readonly string[] = []) {
    super(name, help, "gauge", labelNames);
  }
  protected make() {
    return { v: 0 };
  }
  set(labels: Labels, v: number): void {
    this.child(labels).v = v;
  }
  inc(labels: Labels = {}, by = 1): void {
    this.child(labels).v += by;
  }
  get(labels: Labels = {}): number {
    return this.child(labels).v;
  }
  protected sampleLines(values: string[], c: { v: number }, constant: [string, string][]) {
    return [`${this.name}${labelText(this.labelNames, values, constant)} ${formatValue(c.v)}`];
  }
}

interface HistogramChild {
  /** Observations per bucket, not cumulative (the last slot is above the highest bound). */
  counts: number[];
  sum: number;
  count: number;
}

export class Histogram extends Family<HistogramChild> {
  readonly buckets: readonly number[];

  constructor(name: string, help: string, labelNames: readonly string[], buckets: readonly number[]) {
    const bounds = [...buckets].filter((b) => b !== Infinity);
    if (bounds.length === 0 || bounds.some((b, i) => !Number.isFinite(b) || (i > 0 && b <= bounds[i - 1]!)))
      throw new Error(`histogram ${name}: buckets must be finite and strictly increasing`);
    super(name, help, "histogram", labelNames);
    this.buckets = bounds;
  }

  protected make(): HistogramChild {
    return { counts: new Array(this.buckets.length + 1).fill(0), sum: 0, count: 0 };
  }

  observe(labels: Labels, v: number): void {
    const c = this.child(labels);
    let i = 0;
    while (i < this.buckets.length && v > this.buckets[i]!) i++;
    c.counts[i]!++;
    c.sum += v;
    c.count++;
  }

  /** Observation count of one series (0 when it has none). */
  count(labels: Labels = {}): number {
    return this.child(labels).count;
  }

  protected sampleLines(values: string[], c: HistogramChild, constant: [string, string][]) {
    const lines: string[] = [];
    let cumulative = 0;
    this.buckets.forEach((le, i) => {
      cumulative += c.counts[i]!;
      lines.push(`${this.name}_bucket${labelText(this.labelNames, values, constant, ["le", formatValue(le)])} ${cumulative}`);
    });
    lines.push(`${this.name}_bucket${labelText(this.labelNames, values, constant, ["le", "+Inf"])} ${c.count}`);
    lines.push(`${this.name}_sum${labelText(this.labelNames, values, constant)} ${formatValue(c.sum)}`);
    lines.push(`${this.name}_count${labelText(this.labelNames, values, constant)} ${c.count}`);
    return lines;
  }
}

type AnyFamily = Counter | Gauge | Histogram;

/** Metrics in the order they were made; one name, one metric. */
export class MetricsRegistry {
  private readonly families = new Map<string, AnyFamily>();

  private add<F extends AnyFamily>(f: F): F {
    if (this.families.has(f.name)) throw new Error(`metric ${f.name} is already registered`);
    this.families.set(f.name, f);
    return f;
  }

  counter(name: string, help: string, labelNames: readonly string[] = []): Counter {
    return this.add(new Counter(name, help, labelNames));
  }
  gauge(name: string, help: string, labelNames: readonly string[] = []): Gauge {
    return this.add(new Gauge(name, help, labelNames));
  }
  histogram(name: string, help: string, labelNames: readonly string[], buckets: readonly number[]): Histogram {
    return this.add(new Histogram(name, help, labelNames, buckets));
  }

  names(): string[] {
    return [...this.families.keys()];
  }

  /** The text exposition of every metric: HELP, TYPE, then its samples, each with `constant`'s labels too. */
  render(constant: Labels = {}): string {
    return [...this.families.values()].map((f) => f.render(constant)).join("");
  }
}
