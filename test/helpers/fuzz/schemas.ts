import type { Prng } from "./prng";

// Random and adversarial JSON Schemas for the schema fuzz (test/api/attack/schema-fuzz.test.ts):
// ordinary shapes (objects, arrays, unions, formats, bounds) mixed with what broke llama.cpp's
// converter and grammar in issue 41 — $ref cycles and chains, nested repetitions in patterns,
// huge counts and enums, many optional properties, wrong types for keywords, prototype keys —
// at random depths, so that combinations nobody wrote down are tried too.

const TYPES = ["string", "integer", "number", "boolean", "null", "object", "array"];
const FORMATS = ["date", "time", "date-time", "uuid", "email", "uri", "ipv4", "hostname", "iri", "nope"];
const WEIRD_KEYS = ["__proto__", "constructor", "toString", "$ref", "$defs", "", "é", "a\u0000b", "🙂"];
const WEIRD_VALUES: unknown[] = [-1, 0, 1.5, 2000, 2001, 1e7, 1e300, -1e300, "5", null, true, [], {}, 9007199254740993];

function pattern(r: Prng): string {
  const atom = () => r.pick(["a", "[a-z]", "\\d", ".", "(a|b)", "[^\"]", "\\.", "x"]);
  const quant = () => r.weighted([["", 4], ["*", 1], ["+", 1], ["?", 1], [`{${r.int(0, 3)},${r.int(3, 50)}}`, 2], [`{${r.int(0, 3000)}}`, 1], [`{0,${r.int(1, 3000)}}`, 1], [`{${r.int(0, 9)},}`, 1]] as const);
  const seq = (depth: number): string => {
    let s = "";
    for (let i = r.int(1, 4); i > 0; i--) s += depth > 0 && r.chance(0.4) ? `(${seq(depth - 1)})${quant()}` : atom() + quant();
    return r.chance(0.2) ? `${s}|${atom()}` : s;
  };
  const body = seq(r.int(0, 4));
  return r.weighted([[`^${body}$`, 6], [body, 2], ["^(a{0,2000}){0,2000}$", 1], ["^((a{0,40}){0,40}){0,40}$", 1], ["^(a*)*$", 1], ["(?=a)b", 1]] as const);
}

function refChain(r: Prng, n: number, alias: boolean): Record<string, unknown> {
  const defs: Record<string, unknown> = {};
  for (let i = 0; i < n; i++) defs[`d${i}`] = i + 1 < n ? (alias ? { $ref: `#/$defs/d${i + 1}` } : { type: "object", properties: { x: { $ref: `#/$defs/d${i + 1}` } } }) : { type: r.pick(TYPES) };
  return { $ref: "#/$defs/d0", $defs: defs };
}

/** One random schema node; `defs` are the names a $ref may point at. */
function node(r: Prng, depth: number, defs: string[]): unknown {
  if (r.chance(0.03)) return r.pick([true, false, null, "string", 1, []]);
  if (depth <= 0 || r.chance(0.25)) {
    const type = r.pick(TYPES.slice(0, 5));
    const s: Record<string, unknown> = { type };
    if (type === "string") {
      if (r.chance(0.3)) s.pattern = pattern(r);
      if (r.chance(0.2)) s.format = r.pick(FORMATS);
      if (r.chance(0.2)) s.maxLength = r.chance(0.7) ? r.int(0, 100) : r.pick(WEIRD_VALUES);
      if (r.chance(0.15)) s.minLength = r.chance(0.7) ? r.int(0, 10) : r.pick(WEIRD_VALUES);
      if (r.chance(0.15)) s.enum = Array.from({ length: r.weighted([[r.int(1, 5), 8], [r.int(900, 1200), 1]] as const) }, (_, i) => `v${i}`);
    }
    if (type === "integer" || type === "number") {
      if (r.chance(0.3)) s.minimum = r.chance(0.7) ? r.int(-100, 100) : r.pick(WEIRD_VALUES);
      if (r.chance(0.3)) s.maximum = r.chance(0.7) ? r.int(-100, 1000) : r.pick(WEIRD_VALUES);
      if (r.chance(0.1)) s.exclusiveMinimum = r.pick(WEIRD_VALUES);
    }
    if (r.chance(0.05)) s.nullable = true;
    return s;
  }
  const kind = r.weighted([["object", 5], ["array", 3], ["anyOf", 2], ["allOf", 1], ["oneOf", 1], ["ref", defs.length ? 2 : 0], ["types", 1], ["weird", 1]] as const);
  switch (kind) {
    case "object": {
      const n = r.weighted([[r.int(0, 6), 10], [r.int(120, 300), 1]] as const);
      const properties: Record<string, unknown> = {};
      for (let i = 0; i < n; i++) properties[r.chance(0.05) ? r.pick(WEIRD_KEYS) : `p${i}`] = n > 20 ? { type: "string" } : node(r, depth - 1, defs);
      const keys = Object.keys(properties);
      const s: Record<string, unknown> = { type: "object", properties };
      if (r.chance(0.6)) s.required = keys.filter(() => r.chance(0.6));
      if (r.chance(0.3)) s.additionalProperties = r.chance(0.5) ? r.chance(0.5) : node(r, depth - 1, defs);
      return s;
    }
    case "array": {
      const s: Record<string, unknown> = { type: "array", items: node(r, depth - 1, defs) };
      if (r.chance(0.3)) s.minItems = r.chance(0.8) ? r.int(0, 4) : r.pick(WEIRD_VALUES);
      if (r.chance(0.3)) s.maxItems = r.chance(0.8) ? r.int(1, 20) : r.pick(WEIRD_VALUES);
      if (r.chance(0.1)) s.prefixItems = [node(r, depth - 1, defs), node(r, depth - 1, defs)];
      return s;
    }
    case "anyOf":
    case "oneOf":
    case "allOf":
      return { [kind]: Array.from({ length: r.int(kind === "allOf" ? 1 : 0, 4) }, () => node(r, depth - 1, defs)) };
    case "ref":
      return { $ref: r.chance(0.9) ? `#/$defs/${r.pick(defs)}` : r.pick(["#/$defs/missing", "#", "https://example.com/s.json", "#/definitions/x", 5]) };
    case "types":
      return { type: [r.pick(TYPES), r.pick(TYPES)] };
    default:
      return { type: r.pick(["object", "string", "banana", 7]), [r.pick(["not", "if", "uniqueItems", "patternProperties", "minProperties", r.pick(WEIRD_KEYS)])]: r.pick([...WEIRD_VALUES, { type: "string" }]) };
  }
}

/** A schema for the fuzz: random, or one of the adversarial shapes, or a random one with defs that may refer to each other. */
export function fuzzSchema(r: Prng): unknown {
  const shape = r.weighted([["random", 10], ["defs", 5], ["cycle", 1], ["chain", 1], ["alias", 1], ["enum", 1], ["optional", 1], ["self", 1]] as const);
  switch (shape) {
    case "random":
      return node(r, r.int(1, 6), []);
    case "defs": {
      const names = Array.from({ length: r.int(1, 5) }, (_, i) => `D${i}`);
      const $defs: Record<string, unknown> = {};
      for (const n of names) $defs[n] = r.chance(0.15) ? { $ref: `#/$defs/${r.pick(names)}` } : node(r, r.int(1, 4), names);
      return { ...(node(r, r.int(1, 3), names) as object), $defs };
    }
    case "cycle":
      return { allOf: [{ $ref: "#/$defs/A" }], $defs: { A: r.chance(0.5) ? { $ref: "#/$defs/A" } : { anyOf: [{ $ref: "#/$defs/B" }] }, B: { oneOf: [{ $ref: "#/$defs/A" }, { type: "string" }] } } };
    case "chain":
      return refChain(r, r.weighted([[r.int(10, 200), 3], [r.int(3000, 8000), 1]] as const), false);
    case "alias":
      return refChain(r, r.int(2, 600), true);
    case "enum":
      return { type: "string", enum: Array.from({ length: r.pick([10, 1000, 1001, 20_000]) }, (_, i) => `${"v".repeat(r.int(1, 3))}${i}`) };
    case "optional":
      return { type: "object", properties: Object.fromEntries(Array.from({ length: r.pick([100, 128, 129, 600]) }, (_, i) => [`p${i}`, { type: r.pick(TYPES.slice(0, 4)) }])) };
    default: {
      const k = r.int(5, 120);
      return { $ref: "#/$defs/N", $defs: { N: { type: "object", properties: Object.fromEntries(Array.from({ length: k }, (_, i) => [`p${i}`, { $ref: "#/$defs/N" }])) } } };
    }
  }
}
