import { ApiError } from "../../lib/errors";
import type { JsonSchema } from "../chat-job";
import { llamaAddon } from "./native/addon-path";
import { GRAMMAR_REPETITION_MAX, patternProblem } from "./pattern-limits";
import { refuses, schemaProblem } from "../schema-limits";
import { GRAMMAR_BUDGET } from "./grammar-budget";
import { objectsOnly, requireObjects } from "../object-schema";

// JSON Schema → grammars (issue 24, "Schemas are hints unless strict"). Two readers:
//   - structured output and strict tools: llama.cpp's own converter (common/json-schema-to-grammar,
//     through the addon) enforces the schema token by token — integer bounds, patterns, formats,
//     allOf/anyOf/oneOf, nullable types, $ref. A keyword no grammar can express is refused with a
//     400 naming it, since dropping it would change the answer the caller asked for.
//   - non-strict function tools: the schema is a hint. The same converter enforces what it can
//     express of it; whatever it cannot is dropped, never refused, and a property without `type`
//     means any JSON value. node-llama-cpp's own subset (toFunctionParams) documents the function
//     to the model in the prompt its chat wrapper renders.

const ANNOTATIONS = new Set(["title", "description", "$schema", "$id", "$comment", "default", "examples", "deprecated", "readOnly", "writeOnly", "strict", "name"]);
/** JSON Schema keywords whose meaning no grammar here can enforce: refused under strict, dropped otherwise. */
const INEXPRESSIBLE = new Set([
  "not", "if", "then", "else", "uniqueItems", "contains", "minContains", "maxContains", "multipleOf", "dependentRequired",
  "dependentSchemas", "dependencies", "patternProperties", "propertyNames", "unevaluatedProperties", "unevaluatedItems",
  "contentEncoding", "contentMediaType", "contentSchema", "$dynamicRef", "$recursiveRef",
]);
const BOUNDS = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"] as const;
/** Counts the converter turns into grammar repetitions. */
const COUNTS = ["minLength", "maxLength", "minItems", "maxItems"] as const;
const CONVERTER_FORMATS = new Set(["date", "time", "date-time", "uuid"]);
/** Formats llama.cpp's converter does not know, as anchored patterns it does convert. */
const FORMAT_PATTERNS: Record<string, string> = {
  email: "^[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(\\.[A-Za-z0-9-]{1,63}){0,4}\\.[A-Za-z]{2,24}$",
  uri: "^[a-z][a-z0-9+.-]{0,15}://[A-Za-z0-9._~%!$&'()*+,;=:@/?#-]{1,200}$",
  url: "^[a-z][a-z0-9+.-]{0,15}://[A-Za-z0-9._~%!$&'()*+,;=:@/?#-]{1,200}$",
  ipv4: "^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$",
  hostname: "^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?){0,8}$",
};

function refuse(param: string, keyword: string, why = "cannot be enforced by the constrained-output grammar"): never {
  throw new ApiError("unsupported_schema", `${param}: the JSON Schema keyword "${keyword}" ${why}`, { param: `${param}.${keyword}` });
}

function isObject(v: unknown): v is JsonSchema {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

// ---------------------------------------------------------------------------------------------
// Strict: llama.cpp's converter

interface Addon {
  jsonSchemaToGrammar(schemaJson: string): string;
  grammarCheck(gbnf: string): { states: number; rules: number };
}

/** Whether llama.cpp's converter is here (the llama addon is built; install.sh builds it). */
export function hasConverter(): boolean {
  return typeof llamaAddon<Partial<Addon>>()?.jsonSchemaToGrammar === "function";
}

function converter(): Addon {
  const addon = llamaAddon<Partial<Addon>>();
  if (!addon?.jsonSchemaToGrammar) throw new Error("the llama addon is not built (bun src/3-engines/llama/native/build.ts); it compiles JSON Schemas into grammars");
  return addon as Addon;
}

/**
 * A GBNF grammar (root rule `root`) that enforces `schema`; 400 for what it cannot enforce — or,
 * `lenient` (non-strict tools), what it cannot enforce is left out and the rest enforced.
 */
export function toGbnf(schema: JsonSchema, param: string, lenient = false): string {
  // What the converter could not survive is refused first (schema-limits.ts), here as well as at
  // the request's edge: nothing reaches llama.cpp's converter unmeasured. A hint refuses only sizes.
  const problem = schemaProblem(schema, param);
  if (problem) throw new ApiError(refuses(problem, !lenient) ? "schema_too_complex" : "unsupported_schema", problem.message, { param: problem.param });
  const prepared = toConverterSchema(schema, param, lenient);
  let gbnf: string;
  try {
    gbnf = clientNumbers(bmpWhereCounted(validUtf8Only(converter().jsonSchemaToGrammar(JSON.stringify(prepared))).replace(/^space ::= .*$/m, SPACE)));
  } catch (e) {
    throw new ApiError("unsupported_schema", `${param}: the schema could not be compiled into a grammar (${(e as Error).message.replace(/\s+/g, " ").trim()})`, { param });
  }
  checkGrammar(gbnf, param);
  return gbnf;
}

/**
 * The grammar as the decode loop will parse it: llama.cpp's parser refuses what it cannot follow
 * (a repetition it does not count, left recursion), and the parse states it starts with must fit the
 * loop's budget (decode-loop.ts GRAMMAR_BUDGET) — a 400 here, not a failed request later.
 */
function checkGrammar(gbnf: string, param: string): void {
  const check = llamaAddon<Partial<Addon>>()?.grammarCheck;
  if (!check) return; // an addon built before the check: the loop still refuses what does not parse
  let states: number;
  try {
    states = check(gbnf).states;
  } catch (e) {
    throw new ApiError("unsupported_schema", `${param}: the grammar built from this schema does not parse (${(e as Error).message}): it asks for more than llama.cpp's grammars express (repetitions past ${GRAMMAR_REPETITION_MAX}, or a rule that refers to itself first)`, { param });
  }
  if (states > GRAMMAR_BUDGET.statesMax)
    throw new ApiError("schema_too_complex", `${param}: the grammar built from this schema starts with ${states} parse states (at most ${GRAMMAR_BUDGET.statesMax}): fewer enum values or alternatives`, { param });
}

/**
 * A string with a length bound (`char{m,n}`) is held to the Basic Multilingual Plane: llama.cpp
 * counts characters (code points, as JSON Schema does), while the clients that check the answer
 * (zod, JavaScript's `length`) count UTF-16 units, two for an emoji, so a maxLength the grammar kept
 * was broken for them (found with the AI SDK's zod schemas). Unbounded strings keep every character.
 */
function bmpWhereCounted(gbnf: string): string {
  if (!/(^|[^a-zA-Z0-9-])char\{/m.test(gbnf)) return gbnf;
  const rule = 'bmp-char ::= [^"\\\\\\x7F\\x00-\\x1F\\uD800-\\uDFFF\\U00010000-\\U001FFFFF] | [\\\\] (["\\\\bfnrt] | "u" [0-9a-fA-F]{4})';
  return gbnf.replace(/(^|[^a-zA-Z0-9-])char\{/gm, "$1bmp-char{").replace(/\n?$/, "\n") + rule + "\n";
}

/** The most digits an unbounded integer is written with: 15 (±999,999,999,999,999 < 2^53). */
export const INTEGER_DIGITS_MAX = 15;
/** The most digits of a number's exponent: 2, so |x| < 10^115, a finite double. */
export const EXPONENT_DIGITS_MAX = 2;

/**
 * Numbers a client can use (issue 42): llama.cpp writes an integer with up to 16 digits (past 2^53,
 * which zod's .int() and every JavaScript reader cannot hold exactly) and a number's exponent with
 * up to 16 (`1e601694` is Infinity to JSON.parse). Its integer rules are the only ones that end in
 * `[0-9]{m,15}` (a pattern's repetitions are written as a sub-rule, `x-1{0,15}`), and its number rule
 * the only one with an `integral-part` exponent; both are cut here, in every grammar built from a
 * schema (response formats, tool arguments, json_object's any-object). A bounded integer keeps its
 * bounds (within ±2^53, toConverterSchema refuses others and gives a one-sided bound the safe limit
 * on its open side), so only unbounded integers meet the 15-digit cut.
 */
export function clientNumbers(gbnf: string): string {
  const open = INTEGER_DIGITS_MAX - 1;
  return gbnf
    .replace(/\[0-9\]\{(\d+),15\}/g, (all, m: string) => (Number(m) <= open ? `[0-9]{${m},${open}}` : all))
    .replaceAll("([eE] [-+]? integral-part)?", `([eE] [-+]? [0-9]{1,${EXPONENT_DIGITS_MAX}})?`);
}

/**
 * Whitespace between tokens: one newline and an indent, or a space. llama.cpp's default (two
 * newlines and 20 indent characters at every gap) lets a sampler spend an answer's whole budget
 * on blank lines; pretty-printed JSON still fits.
 */
const SPACE = 'space ::= | " " | "\\n" [ \\t]{0,16}';

/**
 * llama.cpp's grammar decodes a 4-byte lead (F0–F7) without range checks, so a negated class
 * ("any char but …") admits surrogates and values past U+10FFFF, which detokenize to several
 * U+FFFD each — a string the grammar counted as one character comes out as four (maxLength
 * broken, found by the fuzz test). Every negated class here also excludes those values.
 */
function validUtf8Only(gbnf: string): string {
  let out = "";
  let inString = false;
  for (let i = 0; i < gbnf.length; i++) {
    const c = gbnf[i]!;
    if (inString) {
      out += c;
      if (c === "\\") out += gbnf[++i] ?? "";
      else if (c === '"') inString = false;
      continue;
    }
    if (c === '"') inString = true;
    if (c === "[") {
      let j = i + 1;
      while (j < gbnf.length && gbnf[j] !== "]") j += gbnf[j] === "\\" ? 2 : 1;
      out += gbnf.slice(i, j) + (gbnf[i + 1] === "^" ? "\\uD800-\\uDFFF\\U00110000-\\U001FFFFF]" : "]");
      i = j;
      continue;
    }
    out += c;
  }
  return out;
}

/**
 * The schema as the converter reads it, with what it would silently ignore refused — or, `lenient`
 * (a non-strict tool's parameters are a hint), left out: never a 400 there.
 */
export function toConverterSchema(input: unknown, param: string, lenient = false): JsonSchema {
  if (input === true) return {}; // boolean schemas (2019-09+): true is any value
  if (!isObject(input)) {
    if (lenient) return {};
    refuse(param, "(schema)", "must be an object (or true)");
  }
  let schema = input;
  /** Refuses `keyword`, or in lenient mode says to leave it out (true). */
  const drop = (keyword: string, why?: string): true => {
    if (!lenient) refuse(param, keyword, why);
    return true;
  };
  const sub = (s: unknown, at: string) => toConverterSchema(s, at, lenient);
  const out: JsonSchema = {};
  for (const [lo, hi] of [["minLength", "maxLength"], ["minItems", "maxItems"], ["minProperties", "maxProperties"], ["minimum", "maximum"]] as const)
    if (typeof schema[lo] === "number" && typeof schema[hi] === "number" && schema[lo] > schema[hi] && drop(lo, `is greater than ${hi}: no value can match`)) {
      const { [lo]: _, ...rest } = schema;
      schema = rest;
    }
  // What a grammar can count: llama.cpp's parser fails past 2,000 for a minimum and silently drops a larger maximum.
  for (const k of COUNTS)
    if (schema[k] !== undefined && !(Number.isInteger(schema[k]) && (schema[k] as number) >= 0 && (schema[k] as number) <= GRAMMAR_REPETITION_MAX)) {
      drop(k, `must be a whole number from 0 to ${GRAMMAR_REPETITION_MAX} (the most a grammar counts here)`);
      const { [k]: _, ...rest } = schema;
      schema = rest;
    }
  // Integer bounds the converter reads as 64-bit integers; a client's JSON reader keeps 53 bits.
  for (const k of BOUNDS)
    if (typeof schema[k] === "number" && !(Math.abs(schema[k] as number) <= Number.MAX_SAFE_INTEGER)) {
      drop(k, `must be within ±${Number.MAX_SAFE_INTEGER} (a safe integer)`);
      const { [k]: _, ...rest } = schema;
      schema = rest;
    }
  const num = (k: string) => (typeof schema[k] === "number" ? (schema[k] as number) : undefined);
  const lo = num("minimum") !== undefined ? Math.ceil(num("minimum")!) : num("exclusiveMinimum") !== undefined ? Math.floor(num("exclusiveMinimum")!) + 1 : undefined;
  const hi = num("maximum") !== undefined ? Math.floor(num("maximum")!) : num("exclusiveMaximum") !== undefined ? Math.ceil(num("exclusiveMaximum")!) - 1 : undefined;
  const noInteger = lo !== undefined && hi !== undefined && lo > hi && drop(num("minimum") !== undefined ? "minimum" : "exclusiveMinimum", "leaves no integer to choose");
  for (const [k, v] of Object.entries(schema)) {
    if (INEXPRESSIBLE.has(k) && drop(k)) continue;
    switch (k) {
      case "properties":
      case "$defs":
      case "definitions":
        if (!isObject(v) && drop(k, "must be an object")) break;
        // A property whose schema is false may not appear: it is left out of the grammar.
        out[k] = Object.fromEntries(Object.entries(v as JsonSchema).filter(([, s]) => s !== false).map(([n, s]) => [n, sub(s, `${param}.${k}.${n}`)]));
        break;
      case "items":
        if (v === false) out.maxItems = 0;
        else out[k] = sub(v, `${param}.${k}`);
        break;
      case "additionalProperties":
        out[k] = typeof v === "boolean" ? v : sub(v, `${param}.${k}`);
        break;
      case "prefixItems":
      case "anyOf":
      case "oneOf":
      case "allOf":
        if ((!Array.isArray(v) || v.length === 0) && drop(k, "must be a non-empty array")) break;
        out[k] = (v as unknown[]).map((s, i) => sub(s, `${param}.${k}[${i}]`));
        break;
      case "$ref":
        if ((typeof v !== "string" || !/^#\/(\$defs|definitions)\/[^/]+$/.test(v)) && drop(k, 'must point into this schema\'s "$defs" ("#/$defs/Name")')) break;
        out[k] = v;
        break;
      case "pattern": {
        const full = anchored(String(v), param, lenient);
        if (full !== null) out[k] = full;
        break;
      }
      case "format":
        // A pattern beside a format is the constraint (zod's .email() sends both); the format is then an annotation.
        if (typeof v !== "string") drop(k, "must be a string");
        else if (Object.hasOwn(FORMAT_PATTERNS, v)) {
          if (schema.pattern === undefined) out.pattern = FORMAT_PATTERNS[v];
        } else if (CONVERTER_FORMATS.has(v)) out[k] = v;
        else drop(k, `"${v}" is not one of ${[...CONVERTER_FORMATS, ...Object.keys(FORMAT_PATTERNS)].join(", ")}`);
        break;
      case "minProperties":
      case "maxProperties": {
        // llama.cpp's converter ignores both: kept only where the grammar keeps them anyway (every
        // required property is written; no property beyond the listed ones), refused otherwise
        const listed = isObject(schema.properties) ? Object.values(schema.properties).filter((p) => p !== false).length : 0;
        const required = Array.isArray(schema.required) ? new Set(schema.required).size : 0;
        const holds = typeof v === "number" && (k === "minProperties" ? v <= required : schema.additionalProperties === false && listed <= v);
        if (!holds) drop(k, k === "minProperties" ? "is enforced only up to the number of required properties" : 'is enforced only with "additionalProperties": false and no more properties than it allows');
        break;
      }
      case "nullable": // OpenAPI's spelling of a nullable type
        break;
      default:
        if (BOUNDS.includes(k as (typeof BOUNDS)[number]) && (noInteger || !isIntegerOnly(schema.type)) && (noInteger || drop(k, "is enforced on integers only (use \"type\": \"integer\")"))) break;
        if (!ANNOTATIONS.has(k) && k !== "__proto__") out[k] = v;
    }
  }
  // An integer bounded on one side only gets the safe limit on the other: llama.cpp's one-sided
  // rules write up to 16 open digits (past 2^53), and for a minimum of several digits they are
  // wrong as well (`minimum: 200` admitted 20); its two-sided rules are exact.
  if (isIntegerOnly(schema.type) && !noInteger) {
    if (lo !== undefined && hi === undefined) out.maximum = Number.MAX_SAFE_INTEGER;
    if (hi !== undefined && lo === undefined) out.minimum = -Number.MAX_SAFE_INTEGER;
  }
  if (Array.isArray(out.allOf) && (out.properties || out.type) && drop("allOf", "is enforced only on its own (move the sibling keywords into one of its schemas)")) delete out.allOf;
  return schema.nullable === true ? { anyOf: [out, { type: "null" }] } : out;
}

function isIntegerOnly(type: unknown): boolean {
  return type === "integer" || (Array.isArray(type) && type.every((t) => t === "integer" || t === "null"));
}

/**
 * A pattern as the converter takes it: anchored at both ends (JSON Schema patterns match anywhere,
 * so an unanchored side becomes `.*`), and one the converter actually converts — else 400.
 */
function anchored(pattern: string, param: string, lenient = false): string | null {
  const start = pattern.startsWith("^");
  const end = pattern.endsWith("$") && !pattern.endsWith("\\$");
  const full = start && end ? pattern : `^${start ? "" : ".*"}(${pattern.slice(start ? 1 : 0, end ? -1 : undefined)})${end ? "" : ".*"}$`;
  const costly = patternProblem(full);
  if (costly) {
    if (lenient) return null;
    refuse(param, "pattern", costly);
  }
  if (patternConverts(full)) return full;
  if (lenient) return null;
  refuse(param, "pattern", "uses a regular expression the grammar cannot express (llama.cpp's json-schema-to-grammar subset)");
}

const patternCache = new Map<string, boolean>();

/**
 * The converter falls back to any string (its `string` rule, with a warning on stderr) for a
 * pattern it cannot convert; a converted one is the root rule itself.
 */
function patternConverts(pattern: string): boolean {
  let ok = patternCache.get(pattern);
  if (ok === undefined) {
    try {
      ok = !/(^|\n)string ::= /.test(converter().jsonSchemaToGrammar(JSON.stringify({ type: "string", pattern })));
    } catch {
      ok = false;
    }
    if (patternCache.size > 1000) patternCache.clear();
    patternCache.set(pattern, ok);
  }
  return ok;
}

// ---------------------------------------------------------------------------------------------
// Non-strict: node-llama-cpp's function-params subset, everything else dropped

const KEEP: Record<string, Set<string>> = {
  string: new Set(["minLength", "maxLength", "format", "enum", "const"]),
  number: new Set(["enum", "const"]),
  integer: new Set(["enum", "const"]),
  boolean: new Set(["enum", "const"]),
  null: new Set([]),
  object: new Set(["properties", "required", "additionalProperties", "minProperties", "maxProperties"]),
  array: new Set(["items", "prefixItems", "minItems", "maxItems"]),
};
const NLC_FORMATS = new Set(["date-time", "time", "date"]);
const SCALARS = ["string", "number", "boolean", "null"];
/** Any JSON value, in node-llama-cpp's schema subset (an untyped schema there means null). */
const ANY: JsonSchema = { oneOf: [{ type: SCALARS }, { type: "array" }, { type: "object", additionalProperties: true }] };

/** Params for node-llama-cpp's function grammar: the hint it can express; null when nothing is constrained. */
export function toFunctionParams(schema: JsonSchema): JsonSchema | null {
  if (!isObject(schema) || Object.keys(schema).every((k) => ANNOTATIONS.has(k) || !(Object.hasOwn(KEEP, k) || ["type", "properties", "anyOf", "oneOf", "$ref", "enum", "const", "allOf"].includes(k)))) return null;
  // Inlined $refs repeat their defs: a def whose k properties each refer back to it, inlined three
  // levels deep, made k³ nodes (k=100: 68 s of the event loop and 7.9 GB to render into the prompt,
  // issue 41). The hint may be at most twice the schema's own size; past that, any value.
  const budget = { left: 2 * objectCount(schema) + 64 };
  return hint(schema, (schema.$defs ?? schema.definitions) as JsonSchema | undefined, 0, 0, budget);
}

/** Objects in a JSON value (a schema's subschemas and then some), counted without recursion. */
function objectCount(value: unknown): number {
  let n = 0;
  const stack = [value];
  while (stack.length) {
    const v = stack.pop();
    if (typeof v !== "object" || v === null) continue;
    if (!Array.isArray(v)) n++;
    for (const x of Array.isArray(v) ? v : Object.values(v)) if (typeof x === "object" && x !== null) stack.push(x);
  }
  return n;
}

function hint(s: unknown, defs: JsonSchema | undefined, depth: number, refs: number, budget: { left: number }): JsonSchema {
  if (!isObject(s) || depth > 24 || --budget.left < 0) return ANY;
  const out: JsonSchema = typeof s.description === "string" ? { description: s.description } : {};
  const nullable = s.nullable === true;
  const wrap = (x: JsonSchema): JsonSchema => (nullable ? { oneOf: [x, { type: "null" }] } : x);
  if (typeof s.$ref === "string") {
    // Inlined: node-llama-cpp resolves only "#/$defs/…" and a cut-off recursion becomes any value.
    // A recursive schema stops being inlined after a few levels: any value below.
    const m = /^#\/(?:\$defs|definitions)\/([^/]+)$/.exec(s.$ref);
    return wrap(m && defs && isObject(defs[m[1]!]) && refs < 3 ? hint(defs[m[1]!], defs, depth + 1, refs + 1, budget) : ANY);
  }
  for (const key of ["anyOf", "oneOf"] as const)
    if (Array.isArray(s[key]) && (s[key] as unknown[]).length) return wrap({ ...out, oneOf: (s[key] as unknown[]).map((a) => hint(a, defs, depth + 1, refs, budget)) });
  if (Array.isArray(s.allOf) && !s.type && !s.properties) {
    // Merged when every part is an object schema; otherwise the first part is the hint.
    const parts = (s.allOf as unknown[]).filter(isObject);
    if (parts.length && parts.every((p) => p.type === "object" || p.properties))
      return wrap(hint({ type: "object", properties: Object.fromEntries(parts.flatMap((p) => (isObject(p.properties) ? Object.entries(p.properties) : []))), required: parts.flatMap((p) => (Array.isArray(p.required) ? p.required : [])) }, defs, depth + 1, refs, budget));
    return wrap(parts.length ? hint(parts[0], defs, depth + 1, refs, budget) : ANY);
  }
  const scalarOk = (v: unknown) => v === null || ["string", "number", "boolean"].includes(typeof v);
  if ("const" in s && scalarOk(s.const)) return wrap({ ...out, const: s.const });
  if (Array.isArray(s.enum) && s.enum.length && s.enum.every(scalarOk)) return wrap({ ...out, enum: [...s.enum] });
  let type = s.type;
  if (type === undefined) type = s.properties ? "object" : s.items ? "array" : undefined;
  if (Array.isArray(type)) {
    const types = type.filter((t): t is string => typeof t === "string" && Object.hasOwn(KEEP, t));
    if (!types.length) return ANY;
    if (types.every((t) => SCALARS.includes(t) || t === "integer")) return { ...out, type: types };
    return { ...out, oneOf: types.map((t) => hint({ ...s, type: t, nullable: false }, defs, depth + 1, refs, budget)) };
  }
  if (typeof type !== "string" || !Object.hasOwn(KEEP, type)) return wrap({ ...out, ...ANY });
  out.type = type;
  const keep = KEEP[type]!;
  const count = (v: unknown) => Number.isInteger(v) && (v as number) >= 0;
  for (const k of keep) {
    const v = s[k];
    if (v === undefined) continue;
    if (k === "properties" && isObject(v)) out.properties = Object.fromEntries(Object.entries(v).map(([n, p]) => [n, hint(p, defs, depth + 1, refs, budget)]));
    else if (k === "required" && Array.isArray(v)) out.required = v.filter((r) => typeof r === "string" && isObject(s.properties) && r in s.properties);
    else if (k === "additionalProperties") out.additionalProperties = typeof v === "boolean" ? v : hint(v, defs, depth + 1, refs, budget);
    else if (k === "items") out.items = hint(v, defs, depth + 1, refs, budget);
    else if (k === "prefixItems" && Array.isArray(v)) out.prefixItems = v.map((p) => hint(p, defs, depth + 1, refs, budget));
    else if (k === "format") {
      if (typeof v === "string" && NLC_FORMATS.has(v)) out.format = v;
    } else if (k === "enum") {
      if (Array.isArray(v) && v.length && v.every(scalarOk)) out.enum = [...v];
    } else if (k === "const") {
      if (scalarOk(v)) out.const = v;
    } else if (count(v)) out[k] = v;
  }
  // node-llama-cpp cannot combine format with length bounds, nor lengths min > max.
  if (out.format) for (const k of ["minLength", "maxLength"]) delete out[k];
  if (typeof out.minLength === "number" && typeof out.maxLength === "number" && out.minLength > out.maxLength) delete out.minLength;
  if (typeof out.minItems === "number" && typeof out.maxItems === "number" && out.minItems > out.maxItems) delete out.minItems;
  if (typeof out.minProperties === "number" && typeof out.maxProperties === "number" && out.minProperties > out.maxProperties) delete out.minProperties;
  if (type === "object" && !out.properties && out.additionalProperties === undefined) out.additionalProperties = true;
  return wrap(out);
}

/**
 * A tool's arguments' grammar: strict parameters enforced whole (a keyword no grammar can express
 * is refused, 400), otherwise what the grammar can express of them (issue 24; a schema the
 * converter cannot take at all: any JSON object); no parameters: an empty object. Arguments are
 * on one line, as models write them in a call (`{"city": "Paris"}`): a newline and indent between
 * tokens only spent the call's budget.
 */
export function toToolGbnf(input: JsonSchema | undefined, strict: boolean, param: string): string {
  const parameters = input && asArguments(input, strict, param);
  const gbnf = (() => {
    if (!parameters) return toGbnf({ type: "object", properties: {}, additionalProperties: false }, param, true);
    if (strict) return toGbnf(parameters, param);
    try {
      return toGbnf(parameters, param, true);
    } catch {
      return toGbnf({ type: "object" }, param, true);
    }
  })();
  return gbnf.replace(/^space ::= .*$/m, 'space ::= | " "');
}

/**
 * A tool's arguments are a JSON object, as OpenAI's and Anthropic's calls always are (issue 42: a
 * tool with `parameters: {}` was called with `34452e6`, `null`, a string; one whose parameters were a
 * union of scalars with -96): the schema narrowed at its top to the objects it admits
 * (chat/object-schema.ts). One that admits none is refused under strict, naming the keyword, and is
 * any object in a hint.
 */
function asArguments(p: JsonSchema, strict: boolean, param: string): JsonSchema {
  if (strict) return requireObjects(p, param, "a tool's arguments are a JSON object");
  const r = objectsOnly(p);
  return "schema" in r ? r.schema : { type: "object" };
}
