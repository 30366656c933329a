import { pointerToDotted } from "../../config";
import { ApiError } from "./errors";

// Elysia's validation failures → one 400 invalid_request_error that names the field.

interface ValueErrorLike {
  path: string;
  message: string;
  schema?: { anyOf?: { const?: unknown }[]; const?: unknown };
}

/** The first 64 errors of a value, as Elysia's ValidationError.all takes them. */
export function firstErrors(validator: { Errors(value: unknown): Iterable<unknown> }, value: unknown, max = 64): ValueErrorLike[] {
  const all: ValueErrorLike[] = [];
  for (const e of validator.Errors(value)) if (all.push(e as ValueErrorLike) >= max) break;
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
  // A body of the wrong type first; otherwise the deepest path ("messages[0].role" says more than "messages").
  const first = all.find((e) => e.path === "") ?? [...all].sort((a, b) => b.path.length - a.path.length)[0];
  if (!first) return new ApiError("invalid_request", "invalid request body");
  const param = pointerToDotted(first.path) || null;
  return new ApiError("invalid_request", describe(first, param), { param });
}

function describe(e: ValueErrorLike, param: string | null): string {
  const where = param ? `${param}: ` : "request body: ";
  const options = e.schema?.anyOf?.map((s) => s.const).filter((c) => c !== undefined);
  if (options && options.length === e.schema!.anyOf!.length)
    return `${where}must be one of ${options.map((o) => JSON.stringify(o)).join(", ")}`;
  if (e.message === "Expected required property") return `${where}is required`;
  if (e.message === "Expected object" && !param) return "request body must be a JSON object";
  if (e.message.startsWith("Unexpected property")) return `${where}unknown field`;
  return `${where}${e.message.charAt(0).toLowerCase()}${e.message.slice(1)}`;
}
