import { ApiError } from "../../api/http/errors";
import type { JsonSchema } from "../../chat/job";

// JSON Schema → the subset node-llama-cpp compiles into a grammar. Fail closed (issue "chat
// engine"): a keyword the grammar would not enforce is refused with a 400 naming it, never
// answered unconstrained. Returns null for a schema that constrains nothing (any JSON value).

const ANNOTATIONS = new Set(["title", "description", "$schema", "$id", "$comment", "default", "examples", "deprecated", "readOnly", "writeOnly", "strict", "name"]);
const BASIC_TYPES = new Set(["string", "number", "integer", "boolean", "null"]);
const STRING_FORMATS = new Set(["date-time", "time", "date"]);

const ALLOWED: Record<string, Set<string>> = {
  string: new Set(["type", "minLength", "maxLength", "format", "enum", "const"]),
  number: new Set(["type", "enum", "const"]),
  integer: new Set(["type", "enum", "const"]),
  boolean: new Set(["type", "enum", "const"]),
  null: new Set(["type"]),
  object: new Set(["type", "properties", "required", "additionalProperties", "minProperties", "maxProperties", "$defs"]),
  array: new Set(["type", "items", "prefixItems", "minItems", "maxItems", "$defs"]),
};

const KNOWN = new Set([...Object.values(ALLOWED).flatMap((s) => [...s]), "oneOf", "anyOf", "$ref"]);

export function toGrammarSchema(schema: JsonSchema, param: string): JsonSchema | null {
  if (Object.keys(schema).every((k) => ANNOTATIONS.has(k))) return null;
  return convert(schema, param, new Set(Object.keys((schema.$defs as object | undefined) ?? {})));
}

function refuse(param: string, keyword: string, why = "is not supported by the constrained-output grammar"): never {
  throw new ApiError("unsupported_schema", `${param}: the JSON Schema keyword "${keyword}" ${why}`, { param: `${param}.${keyword}` });
}

function convert(s: unknown, param: string, defs: Set<string>): JsonSchema {
  if (typeof s !== "object" || s === null || Array.isArray(s)) refuse(param, "(schema)", "must be an object");
  const schema = s as JsonSchema;
  for (const k of Object.keys(schema)) if (!KNOWN.has(k) && !ANNOTATIONS.has(k)) refuse(param, k);
  const out: JsonSchema = {};
  for (const k of Object.keys(schema)) if (k === "description") out.description = schema.description;

  if ("$ref" in schema) {
    const ref = schema.$ref;
    const m = typeof ref === "string" ? /^#\/\$defs\/(.+)$/.exec(ref) : null;
    if (!m || !defs.has(m[1]!)) refuse(param, "$ref", 'must point into this schema\'s "$defs" ("#/$defs/Name")');
    return { ...out, $ref: ref };
  }
  if ("const" in schema && !("type" in schema)) return { ...out, const: checkScalar(schema.const, `${param}.const`) };
  if ("enum" in schema && !("type" in schema)) return { ...out, enum: checkEnum(schema.enum, param) };
  for (const key of ["oneOf", "anyOf"] as const) {
    if (key in schema) {
      const alts = schema[key];
      if (!Array.isArray(alts) || alts.length === 0) refuse(param, key, "must be a non-empty array");
      for (const k of Object.keys(schema)) if (k !== key && k !== "$defs" && !ANNOTATIONS.has(k)) refuse(param, k, `cannot be combined with "${key}" here`);
      const converted: JsonSchema = { ...out, oneOf: alts.map((a, i) => convert(a, `${param}.${key}[${i}]`, defs)) };
      return withDefs(converted, schema, param, defs);
    }
  }

  const type = schema.type;
  if (Array.isArray(type)) {
    if (!type.every((t) => typeof t === "string" && BASIC_TYPES.has(t))) refuse(param, "type", "may list only string, number, integer, boolean and null");
    for (const k of Object.keys(schema)) if (k !== "type" && !ANNOTATIONS.has(k)) refuse(param, k, "cannot be combined with a list of types");
    return { ...out, type: [...type] };
  }
  if (typeof type !== "string" || !Object.hasOwn(ALLOWED, type)) refuse(param, "type", typeof type === "string" ? `"${type}" is not a JSON Schema type` : "is required");
  for (const k of Object.keys(schema)) if (!ALLOWED[type]!.has(k) && !ANNOTATIONS.has(k)) refuse(param, k);
  out.type = type;

  if (schema.enum !== undefined) out.enum = checkEnum(schema.enum, param);
  if (schema.const !== undefined) out.const = checkScalar(schema.const, `${param}.const`);
  switch (type) {
    case "string":
      for (const k of ["minLength", "maxLength"] as const) if (schema[k] !== undefined) out[k] = count(schema[k], param, k);
      if (schema.format !== undefined) {
        if (typeof schema.format !== "string" || !STRING_FORMATS.has(schema.format)) refuse(param, "format", `"${schema.format}" is not one of date-time, time, date`);
        out.format = schema.format;
      }
      break;
    case "object": {
      const props = (schema.properties ?? {}) as Record<string, unknown>;
      if (typeof props !== "object" || Array.isArray(props)) refuse(param, "properties", "must be an object");
      out.properties = Object.fromEntries(Object.entries(props).map(([k, v]) => [k, convert(v, `${param}.properties.${k}`, defs)]));
      if (schema.required !== undefined) {
        if (!Array.isArray(schema.required) || !schema.required.every((r) => typeof r === "string" && r in props))
          refuse(param, "required", "must list names from properties");
        out.required = [...schema.required];
      }
      if (schema.additionalProperties !== undefined)
        out.additionalProperties =
          typeof schema.additionalProperties === "boolean" ? schema.additionalProperties : convert(schema.additionalProperties, `${param}.additionalProperties`, defs);
      for (const k of ["minProperties", "maxProperties"] as const) if (schema[k] !== undefined) out[k] = count(schema[k], param, k);
      return withDefs(out, schema, param, defs);
    }
    case "array":
      if (schema.items !== undefined) out.items = convert(schema.items, `${param}.items`, defs);
      if (schema.prefixItems !== undefined) {
        if (!Array.isArray(schema.prefixItems)) refuse(param, "prefixItems", "must be an array");
        out.prefixItems = schema.prefixItems.map((p, i) => convert(p, `${param}.prefixItems[${i}]`, defs));
      }
      for (const k of ["minItems", "maxItems"] as const) if (schema[k] !== undefined) out[k] = count(schema[k], param, k);
      return withDefs(out, schema, param, defs);
  }
  return out;
}

function withDefs(out: JsonSchema, schema: JsonSchema, param: string, defs: Set<string>): JsonSchema {
  if (schema.$defs === undefined) return out;
  const d = schema.$defs as Record<string, unknown>;
  if (typeof d !== "object" || d === null || Array.isArray(d)) refuse(param, "$defs", "must be an object");
  const all = new Set([...defs, ...Object.keys(d)]);
  out.$defs = Object.fromEntries(Object.entries(d).map(([k, v]) => [k, convert(v, `${param}.$defs.${k}`, all)]));
  return out;
}

function count(v: unknown, param: string, keyword: string): number {
  if (!Number.isInteger(v) || (v as number) < 0) refuse(param, keyword, "must be a whole number ≥ 0");
  return v as number;
}

function checkScalar(v: unknown, param: string) {
  if (v !== null && !["string", "number", "boolean"].includes(typeof v)) refuse(param, "const", "must be a string, number, boolean or null");
  return v;
}

function checkEnum(v: unknown, param: string) {
  if (!Array.isArray(v) || v.length === 0) refuse(param, "enum", "must be a non-empty array");
  v.forEach((x, i) => checkScalar(x, `${param}.enum[${i}]`));
  return [...v];
}
