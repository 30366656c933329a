// TypeBox values are JSON Schema (draft 2020-12) plus symbol-keyed markers ([Kind], [Optional],
// [Hint]). OpenAPI 3.1 takes JSON Schema 2020-12 as it is (OAS 3.1 §4.8.24: nullable is a type
// array or `anyOf` with `{type:"null"}`, which is what T.Union([x, T.Null()]) already is), so the
// markers are all that goes; sub-schemas that carry an `$id` are hoisted into components.

export type JsonSchema = { [key: string]: unknown };

export const SCHEMA_REF = "#/components/schemas/";

/** A plain JSON copy of a schema: symbol keys, functions and undefined values dropped. */
export function plainSchema(schema: unknown): JsonSchema {
  return copy(schema, false) as JsonSchema;
}

/**
 * A schema an Elysia hook validates with, as the wire sees it. Elysia (normalize, its default)
 * writes `additionalProperties: false` into a hook's object schema when it first compiles the
 * route, then strips undeclared fields before validating: they are accepted and dropped, never
 * refused. So the key is left out — the document is the same whether built before or after the
 * routes ran, and it does not promise a refusal the app never makes.
 */
export function hookSchema(schema: unknown): JsonSchema {
  return copy(schema, true) as JsonSchema;
}

function copy(v: unknown, hook: boolean): unknown {
  if (Array.isArray(v)) return v.map((x) => copy(x, hook));
  if (v === null || typeof v !== "object") return v;
  const out: JsonSchema = {};
  for (const k of Object.keys(v)) {
    const x = (v as JsonSchema)[k];
    if (x === undefined || typeof x === "function") continue;
    if (hook && k === "additionalProperties" && x === false) continue;
    out[k] = copy(x, hook);
  }
  return out;
}

/**
 * Collects component schemas. `add` registers a named schema and answers the `$ref` to it; a
 * sub-schema with an `$id` becomes a component of that name wherever it appears, and a
 * `$ref` to a bare id (T.Ref) is pointed at it.
 */
export class SchemaComponents {
  readonly schemas: Record<string, JsonSchema> = {};
  private readonly named = new Map<unknown, string>();

  /** `hook`: the schema comes from an Elysia hook (see hookSchema). */
  add(name: string, schema: unknown, o: { hook?: boolean } = {}): JsonSchema {
    const known = this.named.get(schema);
    if (known) return { $ref: SCHEMA_REF + known };
    this.put(name, this.hoist(o.hook ? hookSchema(schema) : plainSchema(schema), true));
    this.named.set(schema, name);
    return { $ref: SCHEMA_REF + name };
  }

  /** A schema inlined where it is used, its `$id` sub-schemas hoisted. */
  inline(schema: unknown, o: { hook?: boolean } = {}): JsonSchema {
    return this.hoist(o.hook ? hookSchema(schema) : plainSchema(schema), false);
  }

  private put(name: string, schema: JsonSchema) {
    const prior = this.schemas[name];
    if (prior && JSON.stringify(prior) !== JSON.stringify(schema)) throw new Error(`two different schemas are both named ${name}`);
    this.schemas[name] = schema;
  }

  private hoist(s: JsonSchema, root: boolean): JsonSchema {
    if (typeof s.$id === "string" && !root) {
      const name = componentName(s.$id);
      this.put(name, this.hoist(s, true));
      return { $ref: SCHEMA_REF + name };
    }
    const out: JsonSchema = {};
    for (const [k, v] of Object.entries(s)) {
      if (k === "$id") continue;
      if (k === "$ref" && typeof v === "string" && !v.startsWith("#")) out[k] = SCHEMA_REF + componentName(v);
      else out[k] = this.walk(k, v);
    }
    return out;
  }

  private walk(key: string, v: unknown): unknown {
    // Values of these keywords are data, not schemas: copied as they are.
    if (key === "const" || key === "enum" || key === "default" || key === "examples" || key === "required") return v;
    if (Array.isArray(v)) return v.map((x) => (isObject(x) ? this.hoist(x, false) : x));
    if (!isObject(v)) return v;
    if (key === "properties" || key === "patternProperties" || key === "$defs") {
      const out: JsonSchema = {};
      for (const [name, sub] of Object.entries(v)) out[name] = isObject(sub) ? this.hoist(sub, false) : sub;
      return out;
    }
    return this.hoist(v, false);
  }
}

function isObject(v: unknown): v is JsonSchema {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

/** A component name (`^[a-zA-Z0-9._-]+$`, OAS 3.1 §4.8.7) from an `$id`. */
export function componentName(id: string): string {
  return id.replace(/^.*[/#]/, "").replace(/[^A-Za-z0-9._-]/g, "_") || "Schema";
}
