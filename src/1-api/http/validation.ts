import { pointerToDotted } from "../../lib/config";
import { ApiError } from "./errors";

// Elysia's validation failures → one 400 invalid_request_error that names the field and says what
// it must be. A union's own error names only the union (TypeBox: "Expected union value", which the
// client cannot act on: issue 41's `steps`, `seed`): it is followed into the variant the value took
// (the one whose errors all lie deeper, or the one its `type` names), and where the value took none,
// the union is described from its variants ("must be an integer from 1 to 50 or null").

/** What the mapper reads of a schema (TypeBox emits JSON Schema). */
interface SchemaLike {
  anyOf?: SchemaLike[];
  const?: unknown;
  enum?: unknown[];
  type?: string;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  exclusiveMaximum?: number;
  minLength?: number;
  maxLength?: number;
  minItems?: number;
  maxItems?: number;
  items?: SchemaLike;
  properties?: Record<string, SchemaLike>;
}

interface ValueErrorLike {
  path: string;
  message: string;
  schema?: SchemaLike;
  value?: unknown;
  /** A union's errors, one iterator per variant (TypeBox's ValueError.errors). */
  errors?: Iterable<ValueErrorLike>[];
}

/** Errors read from one iterator: enough to name the first, bounded for a huge invalid value. */
const MAX_ERRORS = 64;

/** The first 64 errors of a value, as Elysia's ValidationError.all takes them. */
export function firstErrors(validator: { Errors(value: unknown): Iterable<unknown> }, value: unknown, max = MAX_ERRORS): ValueErrorLike[] {
  return take(validator.Errors(value) as Iterable<ValueErrorLike>, max);
}

function take(errors: Iterable<ValueErrorLike>, max = MAX_ERRORS): ValueErrorLike[] {
  const all: ValueErrorLike[] = [];
  for (const e of errors) if (all.push(e) >= max) break;
  return all;
}

/**
 * From Elysia's ValidationError (its validator and value: not its `all`, whose summaries interpolate
 * the value and throw on one like {"toString": 1}) or from a list of errors made elsewhere.
 */
export function validationToApiError(error: unknown): ApiError {
  const e = error as { all?: ValueErrorLike[]; validator?: unknown; value?: unknown };
  const validator = e.validator as { Errors?(value: unknown): Iterable<unknown> } | undefined;
  const all = typeof validator?.Errors === "function" ? firstErrors(validator as { Errors(value: unknown): Iterable<unknown> }, e.value) : (e.all ?? []);
  const { param, message } = describeFirstError(all) ?? { param: null, message: "invalid request body" };
  return new ApiError("invalid_request", message, { param });
}

/**
 * The error to report of a list of TypeBox errors, as its dotted field and a sentence; null for
 * none. A body of the wrong type first; otherwise the deepest path ("messages[0].role" says more
 * than "messages"), unions followed (see the top of this file).
 */
export function describeFirstError(errors: readonly ValueErrorLike[]): { param: string | null; message: string } | null {
  const all = errors.flatMap((e) => followUnion(e, 0));
  const first = all.find((e) => e.path === "") ?? [...all].sort((a, b) => b.path.length - a.path.length)[0];
  if (!first) return null;
  const param = pointerToDotted(first.path) || null;
  return { param, message: describe(first, param) };
}

/** A union's error replaced by the errors of the variant the value took, when it took one. */
function followUnion(e: ValueErrorLike, depth: number): ValueErrorLike[] {
  const variants = e.schema?.anyOf;
  if (!variants || !Array.isArray(e.errors) || e.errors.length !== variants.length || depth > 32) return [e];
  // A union nested in this one (a nullable union) errs at the same path: followed first.
  const inner = e.errors.map((it) => take(it).flatMap((x) => (x.path === e.path && x.schema?.anyOf ? followUnion(x, depth + 1) : [x])));
  // Objects told apart by a `type` constant: the variant the value's `type` names, or a refusal of that `type`.
  const tags = variants.map((v) => v.properties?.type?.const);
  const tag = typeof e.value === "object" && e.value !== null && !Array.isArray(e.value) ? (e.value as { type?: unknown }).type : undefined;
  if (tags.every((t) => typeof t === "string") && tag !== undefined) {
    const named = tags.indexOf(tag as string);
    if (named < 0) return [{ path: `${e.path}/type`, message: "", value: tag, schema: { anyOf: tags.map((t) => ({ const: t })) } }];
    return inner[named]!.length ? inner[named]!.flatMap((x) => followUnion(x, depth + 1)) : [e];
  }
  const deeper = inner.filter((errs) => errs.length > 0 && errs.every((x) => x.path.length > e.path.length));
  if (deeper.length === 0) return [e];
  const taken = deeper.reduce((a, b) => (b.length < a.length ? b : a));
  return taken.flatMap((x) => followUnion(x, depth + 1));
}

function describe(e: ValueErrorLike, param: string | null): string {
  const where = param ? `${param}: ` : "request body: ";
  if (e.schema?.anyOf) return `${where}must be ${expected(e.schema)}`;
  if (e.message === "Expected required property") return `${where}is required`;
  if (e.message === "Expected object" && !param) return "request body must be a JSON object";
  if (e.message.startsWith("Unexpected property")) return `${where}unknown field`;
  return `${where}${e.message.charAt(0).toLowerCase()}${e.message.slice(1)}`;
}

/** A schema in words: "an integer from 1 to 50", "a string, an array of strings or null", `one of "a", "b"`. */
export function expected(s: SchemaLike): string {
  if (s.anyOf) {
    const variants = flatten(s);
    const consts = variants.map((v) => v.const);
    if (consts.every((c) => c !== undefined)) return `one of ${consts.map((c) => JSON.stringify(c)).join(", ")}`;
    const parts = [...new Set(variants.map(expected))];
    return parts.length === 1 ? parts[0]! : `${parts.slice(0, -1).join(", ")} or ${parts.at(-1)}`;
  }
  if (s.const !== undefined) return JSON.stringify(s.const);
  if (Array.isArray(s.enum)) return `one of ${s.enum.map((c) => JSON.stringify(c)).join(", ")}`;
  switch (s.type) {
    case "integer":
      return `an integer${range(s)}`;
    case "number":
      return `a number${range(s)}`;
    case "string":
      return `a ${s.minLength === 1 && s.maxLength === undefined ? "non-empty " : ""}string${s.maxLength !== undefined ? ` of at most ${s.maxLength} characters` : ""}`;
    case "boolean":
      return "true or false";
    case "null":
      return "null";
    case "array": {
      const of = s.items && ["string", "integer", "number", "boolean"].includes(s.items.type ?? "") && !s.items.anyOf ? ` ${s.items.type}s` : "";
      const count = s.maxItems !== undefined ? ` of at most ${s.maxItems}${of || " items"}` : of ? ` of${of}` : "";
      return `an array${count}`;
    }
    case "object": {
      const type = s.properties?.type?.const;
      return type !== undefined ? `an object with type ${JSON.stringify(type)}` : "an object";
    }
    default:
      return "a valid value";
  }
}

/** A union's variants, unions within it opened (a nullable union of a string and an array is three). */
const flatten = (s: SchemaLike): SchemaLike[] => (s.anyOf ? s.anyOf.flatMap(flatten) : [s]);

/** A number's bounds in words: " from 1 to 50", " of at least 1", " greater than 0 and at most 2". */
function range(s: SchemaLike): string {
  if (s.minimum !== undefined && s.maximum !== undefined) return ` from ${s.minimum} to ${s.maximum}`;
  const lower = s.minimum !== undefined ? `at least ${s.minimum}` : s.exclusiveMinimum !== undefined ? `greater than ${s.exclusiveMinimum}` : null;
  const upper = s.maximum !== undefined ? `at most ${s.maximum}` : s.exclusiveMaximum !== undefined ? `less than ${s.exclusiveMaximum}` : null;
  const words = [lower, upper].filter(Boolean).join(" and ");
  return words === "" ? "" : words.startsWith("at ") ? ` of ${words}` : ` ${words}`;
}
