// The wire renderers of the one error table (src/lib/errors.ts): OpenAI's envelope and Anthropic's, and
// which a request is answered in. The table and ApiError are re-exported for the routes.
import { ApiError, ERROR_TABLE } from "../../lib/errors";

export { ApiError, asApiError, ERROR_TABLE, type ErrorCode } from "../../lib/errors";
/** "cohere": the /v2/ routes (rerank), answered in OpenAI's envelope plus Cohere's top-level `message`. */
export type WireFormat = "openai" | "anthropic" | "cohere";

/** The OpenAI envelope: {error:{message,type,param,code}} — code is a string or null, never a number. */
export function toOpenAIErrorBody(err: ApiError) {
  const row = ERROR_TABLE[err.code];
  return { error: { message: err.message, type: row.openaiType, param: err.param, code: row.openaiCode } };
}

/** The Anthropic envelope: {type:"error",error:{type,message,details?}} (used only by /v1/messages). */
export function toAnthropicErrorBody(err: ApiError) {
  return { type: "error", error: { type: ERROR_TABLE[err.code].anthropicType, message: err.message, ...(err.details && { details: err.details }) } };
}

export function renderError(err: ApiError, format: WireFormat, extraHeaders: Record<string, string> = {}): Response {
  const body = format === "anthropic" ? toAnthropicErrorBody(err) : format === "cohere" ? { message: err.message, ...toOpenAIErrorBody(err) } : toOpenAIErrorBody(err);
  return new Response(JSON.stringify(body), {
    status: err.status,
    headers: { "content-type": "application/json", ...extraHeaders, ...err.headers },
  });
}

/**
 * Which wire format a request is answered in: the Messages endpoints use Anthropic's envelope, and
 * so does the model list when an Anthropic client (it sends `anthropic-version`) asks for it.
 */
export function formatFor(path: string, headers: Headers): WireFormat {
  if (path === "/v1/messages" || path.startsWith("/v1/messages/")) return "anthropic";
  if (path.startsWith("/v2/")) return "cohere";
  if ((path === "/v1/models" || path.startsWith("/v1/models/")) && headers.has("anthropic-version")) return "anthropic";
  return "openai";
}
