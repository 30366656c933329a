import { ApiError } from "../lib/errors";
import type { JsonSchema } from "./chat-job";

// What a JSON Schema from a client may cost before any converter or grammar sees it (issue 41).
// llama.cpp's schema converter recurses without a visited set (an allOf over a $ref to itself never
// ends), recurses once per $ref followed (a 5,000-link chain overflows the stack), is cubic in an
// object's optional properties (500: 0.17 s, 1,000: 1 s, 2,000: 21 s), and its grammar parser is
// superlinear in an enum's values (10,000: 0.13 s, 100,000: 21 s); the hint a non-strict tool gives
// the model inlines $refs. Every schema is measured here first, in one linear walk with no recursion,
// and refused with a named 400 past these bounds (web/docs/limits.md). The bounds on what a grammar
// can count (repetitions, patterns) are the converter's own business: json-schema.ts.

export const SCHEMA_LIMITS = {
  /** A schema's JSON text. */
  bytes: 256 * 1024,
  /** Subschemas in one schema (every place a schema stands: properties, items, anyOf members, $defs…). */
  nodes: 10_000,
  /** Nesting, with each $ref followed once (the converter's recursion; its stack gave out near 10,000). */
  depth: 256,
  /** Properties in one schema (OpenAI's structured-output limit). */
  properties: 5_000,
  /** Optional properties in one object: the converter's work is cubic in them. */
  optionalProperties: 128,
  /** enum values in one schema (OpenAI's limit); each is an alternative the grammar follows at once. */
  enumValues: 1_000,
  /** Characters of property names, $defs names, enum and const values together (OpenAI's limit). */
  names: 120_000,
  /** Tools in one request. */
  tools: 512,
} as const;

export type SchemaProblemKind =
  /** Too large or too deep: refused wherever the schema is used (it is rendered into the prompt too). */
  | "size"
  /** Defines nothing (a $ref to no def, a def that is only itself): refused wherever it is used. */
  | "invalid"
  /** A structure no grammar can follow (a $ref cycle that consumes nothing, too many optional properties): refused under strict; a hint's grammar falls back to any object. */
  | "grammar";

export interface SchemaProblem {
  kind: SchemaProblemKind;
  param: string;
  message: string;
}

/** Keys whose value is a map of name → subschema. */
const SCHEMA_MAPS = ["properties", "$defs", "definitions", "patternProperties", "dependentSchemas"] as const;
/** Keys whose value is one subschema. */
const SCHEMA_ONE = ["additionalProperties", "items", "additionalItems", "not", "if", "then", "else", "contains", "propertyNames", "unevaluatedItems", "unevaluatedProperties"] as const;
/** Keys whose value is a list of subschemas. */
const SCHEMA_LISTS = ["allOf", "anyOf", "oneOf", "prefixItems", "items"] as const;
/** Where a subschema stands at the very start of its parent's value (nothing written before it). */
const AT_START = new Set(["allOf", "anyOf", "oneOf"]);

const REF = /^#\/(\$defs|definitions)\/([^/]+)$/;

function isObject(v: unknown): v is JsonSchema {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

interface Node {
  schema: JsonSchema;
  at: string;
  depth: number;
  /** The top-level $defs entry it belongs to ("" for the root's own body). */
  def: string;
  /** Reached from its def's start without any character written: only through allOf/anyOf/oneOf. */
  atStart: boolean;
}

/**
 * The first bound `schema` passes, or null. `param` names the schema in messages
 * ("response_format.json_schema.schema", "tools[2].function.parameters").
 */
export function schemaProblem(schema: unknown, param: string): SchemaProblem | null {
  if (schema === true || schema === false || schema === undefined) return null;
  if (!isObject(schema)) return null; // the converter says what a schema must be
  const size = (message: string, at = param): SchemaProblem => ({ kind: "size", param: at, message: `${at}: ${message}` });
  const grammar = (message: string, at: string): SchemaProblem => ({ kind: "grammar", param: at, message: `${at}: ${message}` });
  const invalid = (message: string, at: string): SchemaProblem => ({ kind: "invalid", param: at, message: `${at}: ${message}` });
  const bytes = jsonBytes(schema, SCHEMA_LIMITS.bytes);
  if (bytes > SCHEMA_LIMITS.bytes) return size(`the schema is larger than ${SCHEMA_LIMITS.bytes / 1024} KB of JSON`);

  const defs = new Map<string, JsonSchema>();
  for (const key of ["$defs", "definitions"] as const)
    if (isObject(schema[key])) for (const [name, s] of Object.entries(schema[key] as JsonSchema)) if (isObject(s)) defs.set(`#/${key}/${name}`, s);
  // per def ("" = the root's body): its deepest nesting, the defs it refers to, and those it refers to before writing anything
  const deepest = new Map<string, number>();
  const refs = new Map<string, Set<string>>();
  const leading = new Map<string, Set<string>>();
  const edge = (m: Map<string, Set<string>>, from: string, to: string) => (m.get(from) ?? m.set(from, new Set()).get(from)!).add(to);

  let nodes = 0;
  let properties = 0;
  let enumValues = 0;
  let names = 0;
  const stack: Node[] = [{ schema, at: param, depth: 1, def: "", atStart: true }];
  for (const [ref, s] of defs) stack.push({ schema: s, at: `${param}.${ref.slice(2).replace("/", ".")}`, depth: 1, def: ref, atStart: true });
  while (stack.length) {
    const n = stack.pop()!;
    const s = n.schema;
    if (++nodes > SCHEMA_LIMITS.nodes) return size(`the schema holds more than ${SCHEMA_LIMITS.nodes} subschemas`);
    deepest.set(n.def, Math.max(deepest.get(n.def) ?? 0, n.depth));
    if (n.depth > SCHEMA_LIMITS.depth) return size(`the schema is nested deeper than ${SCHEMA_LIMITS.depth} levels`, n.at);
    if (typeof s.$ref === "string") {
      const target = s.$ref;
      if (REF.test(target)) {
        if (!defs.has(target)) return invalid(`$ref "${target}" names no entry of this schema's $defs`, `${n.at}.$ref`);
        edge(refs, n.def, target);
        if (n.atStart) edge(leading, n.def, target);
      }
    }
    if (Array.isArray(s.enum)) {
      enumValues += s.enum.length;
      if (enumValues > SCHEMA_LIMITS.enumValues) return size(`the schema's enums hold more than ${SCHEMA_LIMITS.enumValues} values in all`, `${n.at}.enum`);
      for (const v of s.enum) names += typeof v === "string" ? v.length : jsonBytes(v, SCHEMA_LIMITS.names);
    }
    if ("const" in s) names += typeof s.const === "string" ? s.const.length : jsonBytes(s.const, SCHEMA_LIMITS.names);
    if (isObject(s.properties)) {
      const keys = Object.keys(s.properties);
      properties += keys.length;
      if (properties > SCHEMA_LIMITS.properties) return size(`the schema holds more than ${SCHEMA_LIMITS.properties} properties in all`, `${n.at}.properties`);
      for (const k of keys) names += k.length;
      const required = new Set(Array.isArray(s.required) ? s.required : []);
      const optional = keys.filter((k) => !required.has(k)).length;
      if (optional > SCHEMA_LIMITS.optionalProperties)
        return grammar(
          `an object may have at most ${SCHEMA_LIMITS.optionalProperties} optional properties (this one has ${optional}): list more of them in "required"`,
          `${n.at}.properties`,
        );
    }
    if (names > SCHEMA_LIMITS.names) return size(`property names, $defs names, enum and const values take more than ${SCHEMA_LIMITS.names} characters in all`, n.at);
    const push = (child: unknown, at: string, key: string) => {
      if (isObject(child)) stack.push({ schema: child, at, depth: n.depth + 1, def: n.def, atStart: n.atStart && AT_START.has(key) });
    };
    for (const key of SCHEMA_MAPS) {
      const v = s[key];
      if (!isObject(v)) continue;
      if (s === schema && (key === "$defs" || key === "definitions")) {
        for (const name of Object.keys(v)) names += name.length; // the root's defs are walked as defs of their own
        continue;
      }
      for (const [name, child] of Object.entries(v)) push(child, `${n.at}.${key}.${name}`, key);
    }
    for (const key of SCHEMA_ONE) push(s[key], `${n.at}.${key}`, key);
    for (const key of SCHEMA_LISTS) {
      const v = s[key];
      if (Array.isArray(v)) v.forEach((child, i) => push(child, `${n.at}.${key}[${i}]`, key));
    }
  }
  if (names > SCHEMA_LIMITS.names) return size(`property names, $defs names, enum and const values take more than ${SCHEMA_LIMITS.names} characters in all`);

  const cycle = leadingCycle(leading);
  if (cycle)
    return invalid(
      `${cycle.map((r) => `"${r}"`).join(" → ")} refers back to itself before any value is written (a $ref cycle through $ref, allOf, anyOf or oneOf alone): no grammar can follow it`,
      `${param}.$ref`,
    );
  const depth = depthWithRefs(deepest, refs);
  if (depth > SCHEMA_LIMITS.depth) return size(`the schema is nested deeper than ${SCHEMA_LIMITS.depth} levels with its $refs followed`);
  return null;
}

/** Whether a problem refuses the schema: every one under strict; in a hint (a non-strict tool), all but what only a grammar cannot follow. */
export function refuses(p: SchemaProblem, strict: boolean): boolean {
  return strict || p.kind !== "grammar";
}

/** Refuses `schema` past its bounds (refuses()); returns the problem it let pass, if any. */
export function checkSchema(schema: unknown, param: string, strict: boolean): SchemaProblem | null {
  const p = schemaProblem(schema, param);
  if (p && refuses(p, strict)) throw new ApiError("schema_too_complex", p.message, { param: p.param });
  return p;
}

/** A request's tools: how many, and each one's parameters. */
export function checkTools(tools: readonly { parameters?: unknown; strict?: boolean }[], param: (i: number) => string): void {
  if (tools.length > SCHEMA_LIMITS.tools) throw new ApiError("schema_too_complex", `tools: at most ${SCHEMA_LIMITS.tools} tools per request (got ${tools.length})`, { param: "tools" });
  tools.forEach((t, i) => checkSchema(t.parameters, param(i), t.strict === true));
}

/** The length of `value`'s JSON, counted up to a little past `cap` (no string is built). */
function jsonBytes(value: unknown, cap: number): number {
  let total = 0;
  const stack: unknown[] = [value];
  while (stack.length && total <= cap) {
    const v = stack.pop();
    if (typeof v === "string") total += v.length + 2;
    else if (Array.isArray(v)) {
      total += 2 + v.length;
      for (const x of v) stack.push(x);
    } else if (isObject(v)) {
      total += 2;
      for (const [k, x] of Object.entries(v)) {
        total += k.length + 4;
        stack.push(x);
      }
    } else total += String(v).length;
  }
  return total;
}

/** A cycle of $defs each reached from the one before with nothing written (left recursion), or null. */
function leadingCycle(leading: Map<string, Set<string>>): string[] | null {
  const state = new Map<string, "open" | "done">();
  for (const start of leading.keys()) {
    if (state.has(start)) continue;
    // iterative depth-first search; the path is the chain of open defs
    const path: { def: string; next: Iterator<string> }[] = [{ def: start, next: (leading.get(start) ?? new Set<string>()).values() }];
    state.set(start, "open");
    while (path.length) {
      const top = path.at(-1)!;
      const step = top.next.next();
      if (step.done) {
        state.set(top.def, "done");
        path.pop();
        continue;
      }
      const to = step.value;
      if (state.get(to) === "open") return [...path.slice(path.findIndex((p) => p.def === to)).map((p) => p.def), to];
      if (state.has(to)) continue;
      state.set(to, "open");
      path.push({ def: to, next: (leading.get(to) ?? new Set<string>()).values() });
    }
  }
  return null;
}

/**
 * An upper bound of how deep the converter recurses: each def is expanded once, where first met,
 * so a chain of defs nests them; defs that refer to each other in a ring (a recursive schema) can
 * all nest in one chain. The longest path over the rings (each weighing the sum of its defs'
 * depths), from the root's body.
 */
function depthWithRefs(deepest: Map<string, number>, refs: Map<string, Set<string>>): number {
  const all = new Set<string>(["", ...deepest.keys(), ...refs.keys()]);
  const { ringOf, rings } = stronglyConnected(all, refs);
  const weight = rings.map((members) => members.reduce((sum, d) => sum + (deepest.get(d) ?? 1), 0));
  // ring graph edges, then the longest path from the root's ring (rings come out in reverse topological order)
  const longest = new Array<number>(rings.length).fill(0);
  for (let r = 0; r < rings.length; r++) {
    let best = 0;
    for (const d of rings[r]!) for (const to of refs.get(d) ?? []) if (ringOf.get(to) !== r) best = Math.max(best, longest[ringOf.get(to)!]!);
    longest[r] = weight[r]! + best;
  }
  return longest[ringOf.get("")!]!;
}

/** Tarjan's strongly connected components, iteratively; rings in reverse topological order. */
function stronglyConnected(nodes: Set<string>, edges: Map<string, Set<string>>): { ringOf: Map<string, number>; rings: string[][] } {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const onStack = new Set<string>();
  const stack: string[] = [];
  const ringOf = new Map<string, number>();
  const rings: string[][] = [];
  let counter = 0;
  for (const root of nodes) {
    if (index.has(root)) continue;
    const work: { node: string; next: Iterator<string> }[] = [];
    const open = (n: string) => {
      index.set(n, counter);
      low.set(n, counter++);
      stack.push(n);
      onStack.add(n);
      work.push({ node: n, next: (edges.get(n) ?? new Set<string>()).values() });
    };
    open(root);
    while (work.length) {
      const top = work.at(-1)!;
      const step = top.next.next();
      if (!step.done) {
        const to = step.value;
        if (!index.has(to)) open(to);
        else if (onStack.has(to)) low.set(top.node, Math.min(low.get(top.node)!, index.get(to)!));
        continue;
      }
      work.pop();
      if (work.length) {
        const parent = work.at(-1)!.node;
        low.set(parent, Math.min(low.get(parent)!, low.get(top.node)!));
      }
      if (low.get(top.node) === index.get(top.node)) {
        const ring: string[] = [];
        let m: string;
        do {
          m = stack.pop()!;
          onStack.delete(m);
          ringOf.set(m, rings.length);
          ring.push(m);
        } while (m !== top.node);
        rings.push(ring);
      }
    }
  }
  return { ringOf, rings };
}
