import { ApiError } from "../lib/errors";
import type { JsonSchema } from "./chat-job";

// Where a JSON object is the contract whatever the schema beside it says (issue 42): a tool call's
// arguments (OpenAI's and Anthropic's calls always carry an object; a tool with `parameters: {}`
// was called with 34452e6, null, a string) and the answer of `response_format: {type: "json_object"}`.
// Pure: the schema narrowed at its top to the objects it admits, before any grammar is built.

const REF = /^#\/(\$defs|definitions)\/([^/]+)$/;
/** $refs followed at the top before giving up (a chain of defs that are only references). */
const REF_HOPS = 16;

function isObject(v: unknown): v is JsonSchema {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/**
 * `schema` narrowed to the JSON objects it admits, read at its top only (what is inside an object is
 * the schema's own business), in the order llama.cpp's converter reads the keywords
 * (common/json-schema.cpp build_node: $ref, oneOf/anyOf, a type list, const, enum, type):
 *   - a top-level $ref: its def, narrowed (inlined when that changed it);
 *   - oneOf / anyOf: the members that admit objects; a type list: "object" when it is in it;
 *   - const / enum: their object values; `nullable` (OpenAPI) is left out;
 *   - no type (`{}`, `true`, properties alone): an object, any the rest allows; allOf as written
 *     (the converter builds an object from it, unless its members are enums).
 * `none` names the keyword that leaves no object ("" for a schema that is not one).
 */
export function objectsOnly(schema: unknown, root: unknown = schema, hops = 0): { schema: JsonSchema } | { none: string } {
  if (schema === true) return { schema: { type: "object" } };
  if (!isObject(schema)) return { none: "" };
  let s: JsonSchema = schema;
  if (s.nullable !== undefined) {
    const { nullable: _, ...rest } = s;
    s = rest;
  }
  if (s.$ref !== undefined) {
    const m = typeof s.$ref === "string" ? REF.exec(s.$ref) : null;
    const defs = m && isObject(root) ? root[m[1]!] : undefined;
    const def = m && isObject(defs) ? defs[m[2]!] : undefined;
    if (def === undefined || hops >= REF_HOPS) return { schema: s }; // a $ref to nothing is refused where refs are checked (schema-limits.ts)
    const inner = objectsOnly(def, root, hops + 1);
    if ("none" in inner) return { none: ".$ref" };
    if (inner.schema === def) return { schema: s };
    // The def narrowed, inlined at the top; the defs stay for the references inside it.
    const { $ref: _, ...rest } = s;
    return { schema: { ...rest, ...inner.schema } };
  }
  const union = s.oneOf !== undefined ? "oneOf" : s.anyOf !== undefined ? "anyOf" : null;
  if (union) {
    const members = Array.isArray(s[union]) ? (s[union] as unknown[]) : [];
    const kept = members.map((m) => objectsOnly(m, root, hops)).flatMap((r) => ("schema" in r ? [r.schema] : []));
    if (kept.length === 0) return { none: `.${union}` };
    return { schema: kept.length === members.length && kept.every((k, i) => k === members[i]) ? s : { ...s, [union]: kept } };
  }
  if (Array.isArray(s.type)) {
    if (!s.type.includes("object")) return { none: ".type" };
    s = { ...s, type: "object" };
  }
  if (s.const !== undefined) return isObject(s.const) ? { schema: s } : { none: ".const" };
  if (s.enum !== undefined) {
    const values = Array.isArray(s.enum) ? s.enum : [];
    const objects = values.filter(isObject);
    if (objects.length === 0) return { none: ".enum" };
    return { schema: objects.length === values.length ? s : { ...s, enum: objects } };
  }
  if (s.type !== undefined) return s.type === "object" ? { schema: s } : { none: ".type" };
  if (s.allOf !== undefined) {
    const members = Array.isArray(s.allOf) ? s.allOf : [];
    return members.some((m) => isObject(m) && (m.enum !== undefined || m.const !== undefined)) ? { none: ".allOf" } : { schema: s };
  }
  return { schema: { ...s, type: "object" } };
}

/** `schema` narrowed to objects (objectsOnly), or a 400 naming the keyword that admits none; `param` names the schema. */
export function requireObjects(schema: unknown, param: string, why: string): JsonSchema {
  const r = objectsOnly(schema);
  if ("schema" in r) return r.schema;
  throw new ApiError("unsupported_schema", `${param}${r.none}: admits no JSON object, and ${why}`, { param: `${param}${r.none}` });
}
