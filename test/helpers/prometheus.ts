import { expect } from "bun:test";

// A strict reader of the Prometheus text format 0.0.4: every line must be a HELP, a TYPE, another
// comment, a blank line or a sample; samples belong to a family whose TYPE came first; a
// histogram's buckets rise, end at +Inf, and +Inf equals _count.

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Exposition {
  types: Map<string, string>;
  help: Map<string, string>;
  samples: Sample[];
  /** The value of the one sample with this name and exactly these labels (undefined if none). */
  value(name: string, labels?: Record<string, string>): number | undefined;
}

const NAME = "[a-zA-Z_:][a-zA-Z0-9_:]*";
const HELP = new RegExp(`^# HELP (${NAME}) (.*)$`);
const TYPE = new RegExp(`^# TYPE (${NAME}) (counter|gauge|histogram|summary|untyped)$`);
const SAMPLE_NAME = new RegExp(`^(${NAME})`);
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*/;
const VALUE = /^(?:[+-]?Inf|NaN|[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)$/;

function parseValue(s: string, line: string): number {
  if (!VALUE.test(s)) throw new Error(`bad value "${s}" in: ${line}`);
  if (s === "+Inf" || s === "Inf") return Infinity;
  if (s === "-Inf") return -Infinity;
  return Number(s);
}

function parseLabels(s: string, line: string): { labels: Record<string, string>; rest: string } {
  const labels: Record<string, string> = {};
  let i = 1; // past "{"
  while (true) {
    if (s[i] === "}") return { labels, rest: s.slice(i + 1) };
    const name = LABEL_NAME.exec(s.slice(i))?.[0];
    if (!name) throw new Error(`bad label name in: ${line}`);
    i += name.length;
    if (s.slice(i, i + 2) !== '="') throw new Error(`expected =" after ${name} in: ${line}`);
    i += 2;
    let value = "";
    while (s[i] !== '"') {
      if (i >= s.length) throw new Error(`unterminated label value in: ${line}`);
      if (s[i] === "\\") {
        const e = s[i + 1];
        if (e === "\\") value += "\\";
        else if (e === '"') value += '"';
        else if (e === "n") value += "\n";
        else throw new Error(`bad escape \\${e} in: ${line}`);
        i += 2;
      } else value += s[i++];
    }
    i++;
    if (name in labels) throw new Error(`label ${name} twice in: ${line}`);
    labels[name] = value;
    if (s[i] === ",") i++;
    else if (s[i] !== "}") throw new Error(`expected , or } in: ${line}`);
  }
}

/** The family a sample belongs to: its own name, or a histogram's base name. */
function familyOf(name: string, types: Map<string, string>): string | undefined {
  if (types.has(name)) return name;
  for (const suffix of ["_bucket", "_sum", "_count"]) {
    const base = name.endsWith(suffix) ? name.slice(0, -suffix.length) : "";
    if (base && (types.get(base) === "histogram" || types.get(base) === "summary")) return base;
  }
  return undefined;
}

export function parseExposition(text: string): Exposition {
  if (!text.endsWith("\n")) throw new Error("the exposition must end with a line feed");
  const types = new Map<string, string>();
  const help = new Map<string, string>();
  const samples: Sample[] = [];
  const seen = new Set<string>();
  for (const line of text.slice(0, -1).split("\n")) {
    if (line === "") continue;
    if (line.startsWith("#")) {
      const h = HELP.exec(line);
      const t = TYPE.exec(line);
      if (h) {
        if (help.has(h[1]!)) throw new Error(`HELP twice for ${h[1]}`);
        help.set(h[1]!, h[2]!);
      } else if (t) {
        if (types.has(t[1]!)) throw new Error(`TYPE twice for ${t[1]}`);
        types.set(t[1]!, t[2]!);
      } else if (line.startsWith("# HELP") || line.startsWith("# TYPE")) throw new Error(`bad comment: ${line}`);
      continue;
    }
    const name = SAMPLE_NAME.exec(line)?.[1];
    if (!name) throw new Error(`bad sample: ${line}`);
    let rest = line.slice(name.length);
    let labels: Record<string, string> = {};
    if (rest.startsWith("{")) ({ labels, rest } = parseLabels(rest, line));
    const parts = rest.split(" ");
    if (parts[0] !== "" || parts.length < 2 || parts.length > 3) throw new Error(`bad sample: ${line}`);
    const value = parseValue(parts[1]!, line);
    if (parts[2] !== undefined && !/^-?\d+$/.test(parts[2])) throw new Error(`bad timestamp: ${line}`);
    const family = familyOf(name, types);
    if (!family) throw new Error(`sample before its TYPE: ${line}`);
    const key = name + JSON.stringify(Object.entries(labels).sort());
    if (seen.has(key)) throw new Error(`sample twice: ${line}`);
    seen.add(key);
    samples.push({ name, labels, value });
  }
  checkHistograms(types, samples);
  return {
    types,
    help,
    samples,
    value(name, labels = {}) {
      const want = JSON.stringify(Object.entries(labels).sort());
      return samples.find((s) => s.name === name && JSON.stringify(Object.entries(s.labels).sort()) === want)?.value;
    },
  };
}

function checkHistograms(types: Map<string, string>, samples: Sample[]) {
  for (const [family, type] of types) {
    if (type !== "histogram") continue;
    const series = new Map<string, { buckets: [number, number][]; count?: number; sum?: number }>();
    for (const s of samples) {
      if (!s.name.startsWith(family + "_")) continue;
      const { le, ...rest } = s.labels;
      const key = JSON.stringify(Object.entries(rest).sort());
      const entry = series.get(key) ?? { buckets: [] };
      series.set(key, entry);
      if (s.name === `${family}_bucket`) {
        if (le === undefined) throw new Error(`${family}_bucket without le`);
        entry.buckets.push([parseValue(le, le), s.value]);
      } else if (s.name === `${family}_count`) entry.count = s.value;
      else if (s.name === `${family}_sum`) entry.sum = s.value;
    }
    for (const [key, e] of series) {
      expect(e.count, `${family}${key} has _count`).toBeDefined();
      expect(e.sum, `${family}${key} has _sum`).toBeDefined();
      const les = e.buckets.map((b) => b[0]);
      expect(les, `${family}${key} buckets rise`).toEqual([...les].sort((a, b) => a - b));
      expect(les.at(-1), `${family}${key} ends at +Inf`).toBe(Infinity);
      const counts = e.buckets.map((b) => b[1]);
      expect(counts, `${family}${key} is cumulative`).toEqual([...counts].sort((a, b) => a - b));
      expect(counts.at(-1), `${family}${key} +Inf equals _count`).toBe(e.count!);
    }
  }
}
