import type { Prng } from "./prng";
import { anyValue, EXTREME_NUMBERS, hostileString, PROTOTYPE_KEYS, setKey } from "./values";

// Values from the JSON Schemas of /openapi.json: a valid-looking value for a schema, then one
// mutation of it (a field dropped, a wrong type, an extra or prototype-named field, an extreme
// number, deep nesting). Generation follows the schema's keywords as TypeBox writes them
// (type, const, anyOf, required, properties, patternProperties, items, min/max…).

export type JsonSchema = Record<string, any>;

/**
 * A value for a field, by its path (e.g. ["messages", 0, "content"]), instead of one generated
 * from the schema; undefined to generate. Keeps requests that pass validation cheap to run.
 */
export type Hint = (path: (string | number)[], schema: JsonSchema) => unknown;

export interface Generator {
  rng: Prng;
  /** The OpenAPI document, to resolve `$ref`s. */
  doc: { components: { schemas: Record<string, JsonSchema> } };
  hint?: Hint;
  /** How often an optional field is present (at the top level; less deeper down). */
  optional?: number;
}

export function deref(schema: JsonSchema, doc: Generator["doc"]): JsonSchema {
  let s = schema;
  for (let i = 0; s?.$ref && i < 16; i++) s = doc.components.schemas[String(s.$ref).replace("#/components/schemas/", "")]!;
  return s ?? {};
}

const MAX_DEPTH = 6;

/** A value the schema accepts (as far as its keywords say), with hints applied. */
export function generate(schema: JsonSchema, g: Generator, path: (string | number)[] = []): unknown {
  const s = deref(schema, g.doc);
  const hinted = g.hint?.(path, s);
  if (hinted !== undefined) return hinted;
  const r = g.rng;
  if ("const" in s) return s.const;
  if (Array.isArray(s.enum)) return r.pick(s.enum);
  const alts = s.anyOf ?? s.oneOf;
  if (Array.isArray(alts)) {
    // Prefer a non-null branch: null is the least interesting value a field can take.
    const nonNull = alts.filter((a: JsonSchema) => deref(a, g.doc).type !== "null");
    return generate(nonNull.length && r.chance(0.9) ? r.pick(nonNull) : r.pick(alts), g, path);
  }
  if (Array.isArray(s.allOf) && s.allOf.length) return generate(s.allOf[0], g, path);
  const type = Array.isArray(s.type) ? r.pick(s.type) : s.type;
  switch (type) {
    case "object":
      return generateObject(s, g, path);
    case "array": {
      if (path.length > MAX_DEPTH) return [];
      const min = s.minItems ?? 0;
      const max = Math.min(s.maxItems ?? min + 2, min + 2);
      return Array.from({ length: r.int(min, max) }, (_, i) => generate(s.items ?? {}, g, [...path, i]));
    }
    case "string":
      return generateString(s, r);
    case "integer": {
      const lo = Math.max(s.minimum ?? -3, s.exclusiveMinimum !== undefined ? s.exclusiveMinimum + 1 : -Infinity);
      const hi = Math.min(s.maximum ?? lo + 20, s.exclusiveMaximum !== undefined ? s.exclusiveMaximum - 1 : Infinity, lo + 20);
      return r.int(Math.ceil(lo), Math.floor(hi));
    }
    case "number": {
      const lo = s.minimum ?? s.exclusiveMinimum ?? 0;
      const hi = Math.min(s.maximum ?? s.exclusiveMaximum ?? lo + 2, lo + 2);
      const v = lo + r.float() * (hi - lo);
      return s.exclusiveMinimum !== undefined && v <= s.exclusiveMinimum ? (lo + hi) / 2 : v;
    }
    case "boolean":
      return r.chance(0.5);
    case "null":
      return null;
    default:
      // An unconstrained field ({}): anything.
      return path.length > MAX_DEPTH ? null : anyValue(r, 1);
  }
}

function generateObject(s: JsonSchema, g: Generator, path: (string | number)[]): Record<string, unknown> {
  const r = g.rng;
  const out: Record<string, unknown> = {};
  const required = new Set<string>(s.required ?? []);
  const props: Record<string, JsonSchema> = s.properties ?? {};
  const deep = path.length > MAX_DEPTH;
  for (const [name, sub] of Object.entries(props)) {
    // Required fields always; optional ones often near the top, rarely deep down.
    const p = g.optional ?? 0.3;
    if (required.has(name) || (!deep && r.chance(path.length === 0 ? p : p * 0.7))) {
      const v = generate(sub, g, [...path, name]);
      if (v !== undefined) setKey(out, name, v);
    }
  }
  const pattern = s.patternProperties ? Object.values<JsonSchema>(s.patternProperties)[0] : undefined;
  if (pattern && !deep) for (let i = r.int(0, 2); i > 0; i--) setKey(out, r.word(), generate(pattern, g, [...path, "*"]));
  return out;
}

function generateString(s: JsonSchema, r: Prng): string {
  const min = s.minLength ?? 0;
  const max = Math.min(s.maxLength ?? min + 12, min + 12);
  if (s.pattern === "^[0-9]+$") return String(r.int(0, 50));
  let out = r.word(Math.max(min, 1), Math.max(max, 1));
  if (min === 0 && r.chance(0.05)) out = "";
  return out;
}

// ---- mutations --------------------------------------------------------------------------------

export type Path = (string | number)[];

/** Every place in a value: the root, each object field and each array element. */
export function paths(value: unknown, at: Path = [], out: Path[] = []): Path[] {
  out.push(at);
  if (at.length > 12) return out;
  if (Array.isArray(value)) value.forEach((v, i) => paths(v, [...at, i], out));
  else if (value && typeof value === "object") for (const k of Object.keys(value)) paths((value as any)[k], [...at, k], out);
  return out;
}

export function getAt(value: unknown, p: Path): unknown {
  let v: any = value;
  for (const k of p) v = v?.[k];
  return v;
}

/** Replaces the value at `p` (the root when p is empty); returns the new root. */
export function setAt(root: unknown, p: Path, v: unknown): unknown {
  if (p.length === 0) return v;
  const parent: any = getAt(root, p.slice(0, -1));
  const k = p[p.length - 1]!;
  if (Array.isArray(parent)) parent[k as number] = v;
  else if (parent && typeof parent === "object") setKey(parent, String(k), v);
  return root;
}

function removeAt(root: unknown, p: Path): void {
  const parent: any = getAt(root, p.slice(0, -1));
  const k = p[p.length - 1]!;
  if (Array.isArray(parent)) parent.splice(k as number, 1);
  else if (parent && typeof parent === "object") delete parent[k];
}

const typeOf = (v: unknown) => (v === null ? "null" : Array.isArray(v) ? "array" : typeof v);

/** A value of another JSON type than `v`'s. */
export function wrongType(r: Prng, v: unknown): unknown {
  for (let i = 0; i < 20; i++) {
    const w = anyValue(r);
    if (typeOf(w) !== typeOf(v)) return w;
  }
  return typeOf(v) === "string" ? 1 : "x";
}

/** A sentinel string replaced in the JSON text by a deeply nested value (see deepJson). */
export const DEEP_SENTINEL = "\u0001deep\u0001";

export type Mutation = "drop" | "wrong-type" | "extra-field" | "extreme-number" | "proto-top" | "proto-nested" | "proto-value" | "hostile-string" | "null" | "deep";

export const MUTATIONS: Mutation[] = ["drop", "wrong-type", "extra-field", "extreme-number", "proto-top", "proto-nested", "proto-value", "hostile-string", "null", "deep"];

/**
 * Applies one mutation to a (fresh, owned) value; returns the new value and a short description.
 * `protect` names top-level fields that are never dropped, nulled or set to an extreme number
 * (e.g. a bounded max_tokens or image steps: any of those could leave a valid request that runs an
 * engine for minutes); every other mutation (wrong type, hostile string, nesting…) reaches them.
 */
export function mutate(r: Prng, value: unknown, m: Mutation, protect: ReadonlySet<string> = new Set()): { value: unknown; what: string } {
  // Only the mutations that can make a bounded field unbounded and still valid spare it.
  const guarded = m === "drop" || m === "null" || m === "extreme-number";
  const all = paths(value).filter((p) => !(guarded && p.length >= 1 && protect.has(String(p[0]))));
  const inner = all.filter((p) => p.length > 0);
  const objects = all.filter((p) => { const v = getAt(value, p); return v !== null && typeof v === "object" && !Array.isArray(v); });
  const at = (ps: Path[]) => (ps.length ? r.pick(ps) : []);
  const show = (p: Path) => (p.length ? p.join(".") : "(root)");
  switch (m) {
    case "drop": {
      const fields = inner.filter((p) => typeof p[p.length - 1] === "string");
      if (!fields.length) return { value: {}, what: "drop: all fields" };
      const p = r.pick(fields);
      removeAt(value, p);
      return { value, what: `drop ${show(p)}` };
    }
    case "wrong-type": {
      const p = at(inner.length && r.chance(0.9) ? inner : all);
      return { value: setAt(value, p, wrongType(r, getAt(value, p))), what: `wrong type at ${show(p)}` };
    }
    case "extra-field": {
      const p = at(objects);
      const name = r.pick([r.word(), `${r.word()}_${r.word()}`, "", " ", "a.b", "$ref", "0", "-1", "\u0000", "😀"]);
      setKey(getAt(value, p) as Record<string, unknown>, name, anyValue(r));
      return { value, what: `extra field ${JSON.stringify(name)} at ${show(p)}` };
    }
    case "extreme-number": {
      const p = at(inner.length ? inner : all);
      const n = r.pick(EXTREME_NUMBERS);
      return { value: setAt(value, p, n), what: `${n} at ${show(p)}` };
    }
    case "proto-top":
    case "proto-nested": {
      const nested = objects.filter((p) => p.length > 0);
      const p = m === "proto-top" || !nested.length ? [] : r.pick(nested);
      const key = r.pick(PROTOTYPE_KEYS);
      const target = getAt(value, p) as Record<string, unknown>;
      const v = r.pick<() => unknown>([() => anyValue(r), () => ({ polluted: true }), () => r.word(), () => 1, () => null, () => [1, 2], () => ({ prototype: { polluted: 1 } })])();
      setKey(target, key, v);
      return { value, what: `${JSON.stringify(key)}=${JSON.stringify(v)} at ${show(p)}` };
    }
    case "proto-value": {
      // In place of a field's value, an object whose own toString / valueOf are not functions:
      // code that turns the value into a string (a template, a message) throws on it.
      const p = at(inner.length ? inner : all);
      const v: Record<string, unknown> = {};
      for (const k of r.chance(0.5) ? ["toString", "valueOf"] : [r.pick(["toString", "valueOf", "toJSON", "constructor", "__proto__"])]) setKey(v, k, r.pick<unknown>([[], 1, "x", null, {}, true]));
      return { value: setAt(value, p, v), what: `${JSON.stringify(v)} at ${show(p)}` };
    }
    case "hostile-string": {
      const p = at(inner.length ? inner : all);
      return { value: setAt(value, p, hostileString(r)), what: `hostile string at ${show(p)}` };
    }
    case "null": {
      const p = at(inner.length ? inner : all);
      return { value: setAt(value, p, null), what: `null at ${show(p)}` };
    }
    case "deep": {
      const p = at(inner.length && r.chance(0.8) ? inner : all);
      return { value: setAt(value, p, DEEP_SENTINEL), what: `deep nesting at ${show(p)}` };
    }
  }
}
