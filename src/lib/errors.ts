// One closed table of API error codes (STYLE "Errors flow to one table"), and the error every layer
// throws. Below the edge (issue 43): services, engines and stores throw ApiError without knowing a
// wire format; the renderers for OpenAI's and Anthropic's envelopes are the edge's
// (src/1-api/http/errors.ts).
// Each row gives the HTTP status, the OpenAI `type`/`code`, and the Anthropic `type`.

export const ERROR_TABLE = {
  invalid_request: { status: 400, openaiType: "invalid_request_error", openaiCode: null, anthropicType: "invalid_request_error" },
  context_length_exceeded: { status: 400, openaiType: "invalid_request_error", openaiCode: "context_length_exceeded", anthropicType: "invalid_request_error" },
  unsupported_schema: { status: 400, openaiType: "invalid_request_error", openaiCode: "unsupported_schema", anthropicType: "invalid_request_error" },
  // A schema past the bounds of web/docs/limits.md, or a grammar that grew past its budget while generating.
  schema_too_complex: { status: 400, openaiType: "invalid_request_error", openaiCode: "schema_too_complex", anthropicType: "invalid_request_error" },
  // /v1/decisions (issue 47): more questions than a request may ask, or a question whose answers are malformed.
  too_many_questions: { status: 400, openaiType: "invalid_request_error", openaiCode: "too_many_questions", anthropicType: "invalid_request_error" },
  // A model of another kind than the endpoint serves (a chat model on /v1/rerank), and an image to a model that reads none.
  wrong_model_kind: { status: 400, openaiType: "invalid_request_error", openaiCode: "wrong_model_kind", anthropicType: "invalid_request_error" },
  images_not_supported: { status: 400, openaiType: "invalid_request_error", openaiCode: "images_not_supported", anthropicType: "invalid_request_error" },
  too_many_documents: { status: 400, openaiType: "invalid_request_error", openaiCode: "too_many_documents", anthropicType: "invalid_request_error" },
  invalid_question: { status: 400, openaiType: "invalid_request_error", openaiCode: "invalid_question", anthropicType: "invalid_request_error" },
  too_many_images: { status: 400, openaiType: "invalid_request_error", openaiCode: "too_many_images", anthropicType: "invalid_request_error" },
  invalid_image: { status: 400, openaiType: "invalid_request_error", openaiCode: "invalid_image", anthropicType: "invalid_request_error" },
  invalid_image_url: { status: 400, openaiType: "invalid_request_error", openaiCode: "invalid_image_url", anthropicType: "invalid_request_error" },
  invalid_json: { status: 400, openaiType: "invalid_request_error", openaiCode: "invalid_json", anthropicType: "invalid_request_error" },
  invalid_api_key: { status: 401, openaiType: "invalid_request_error", openaiCode: "invalid_api_key", anthropicType: "authentication_error" },
  free_quota_exhausted: { status: 402, openaiType: "insufficient_quota", openaiCode: "free_quota_exhausted", anthropicType: "billing_error" },
  insufficient_balance: { status: 402, openaiType: "insufficient_quota", openaiCode: "insufficient_balance", anthropicType: "billing_error" },
  invalid_credentials: { status: 401, openaiType: "invalid_request_error", openaiCode: "invalid_credentials", anthropicType: "authentication_error" },
  not_signed_in: { status: 401, openaiType: "invalid_request_error", openaiCode: "not_signed_in", anthropicType: "authentication_error" },
  csrf_failed: { status: 403, openaiType: "permission_error", openaiCode: "csrf_failed", anthropicType: "permission_error" },
  admin_only: { status: 403, openaiType: "permission_error", openaiCode: "admin_only", anthropicType: "permission_error" },
  premium_key_required: { status: 403, openaiType: "permission_error", openaiCode: "premium_key_required", anthropicType: "permission_error" },
  missing_scope: { status: 403, openaiType: "permission_error", openaiCode: "missing_scope", anthropicType: "permission_error" },
  not_found: { status: 404, openaiType: "invalid_request_error", openaiCode: "not_found", anthropicType: "not_found_error" },
  // Message threads on /v1/messages (api/anthropic/threads.ts): the Anthropic SDK reads
  // error.details.error_code and recovers (the first three: it replays the whole conversation).
  thread_not_found: { status: 404, openaiType: "invalid_request_error", openaiCode: "thread_not_found", anthropicType: "not_found_error" },
  thread_already_continued: { status: 400, openaiType: "invalid_request_error", openaiCode: "thread_already_continued", anthropicType: "invalid_request_error" },
  thread_continue_in_flight: { status: 400, openaiType: "invalid_request_error", openaiCode: "thread_continue_in_flight", anthropicType: "invalid_request_error" },
  thread_fingerprint_mismatch: { status: 400, openaiType: "invalid_request_error", openaiCode: "thread_fingerprint_mismatch", anthropicType: "invalid_request_error" },
  thread_unsupported: { status: 400, openaiType: "invalid_request_error", openaiCode: "thread_unsupported_request", anthropicType: "invalid_request_error" },
  model_not_found: { status: 404, openaiType: "invalid_request_error", openaiCode: "model_not_found", anthropicType: "not_found_error" },
  conflict: { status: 409, openaiType: "invalid_request_error", openaiCode: "conflict", anthropicType: "invalid_request_error" },
  node_not_found: { status: 404, openaiType: "invalid_request_error", openaiCode: "node_not_found", anthropicType: "not_found_error" },
  node_unavailable: { status: 409, openaiType: "invalid_request_error", openaiCode: "node_unavailable", anthropicType: "invalid_request_error" },
  max_active_rentals_reached: { status: 409, openaiType: "invalid_request_error", openaiCode: "max_active_rentals_reached", anthropicType: "invalid_request_error" },
  idempotency_key_reused: { status: 422, openaiType: "invalid_request_error", openaiCode: "idempotency_key_reused", anthropicType: "invalid_request_error" },
  // A request body that did not keep its pace (server.body_grace_s, server.body_min_bytes_per_s); the connection is closed.
  request_timeout: { status: 408, openaiType: "invalid_request_error", openaiCode: "request_timeout", anthropicType: "invalid_request_error" },
  payload_too_large: { status: 413, openaiType: "invalid_request_error", openaiCode: "payload_too_large", anthropicType: "request_too_large" },
  // An upload past the account's storage quota ([files] quota_mb): 413, not 429, as retrying cannot help.
  storage_quota_exceeded: { status: 413, openaiType: "invalid_request_error", openaiCode: "storage_quota_exceeded", anthropicType: "request_too_large" },
  rate_limit_exceeded: { status: 429, openaiType: "rate_limit_error", openaiCode: "rate_limit_exceeded", anthropicType: "rate_limit_error" },
  daily_limit_exceeded: { status: 429, openaiType: "rate_limit_error", openaiCode: "daily_limit_exceeded", anthropicType: "rate_limit_error" },
  workers_busy: { status: 429, openaiType: "rate_limit_error", openaiCode: "workers_busy", anthropicType: "rate_limit_error" },
  concurrency_limit_exceeded: { status: 429, openaiType: "rate_limit_error", openaiCode: "concurrency_limit_exceeded", anthropicType: "rate_limit_error" },
  image_workers_busy: { status: 503, openaiType: "server_error", openaiCode: "workers_busy", anthropicType: "overloaded_error" },
  // A server behind the appliance (a rental's notebook) failed or answered what may not be passed on.
  upstream_error: { status: 502, openaiType: "server_error", openaiCode: "upstream_error", anthropicType: "api_error" },
  // An upload that would leave the data dir's filesystem under [files] min_free_disk_mb (RFC 4918's 507).
  insufficient_storage: { status: 507, openaiType: "server_error", openaiCode: "insufficient_storage", anthropicType: "api_error" },
  model_unavailable: { status: 503, openaiType: "server_error", openaiCode: "model_unavailable", anthropicType: "overloaded_error" },
  // This node of a cluster takes no new work: drained by an operator, or fenced (its beats do not reach the store). Another node may.
  // A request that claims to come from another node of the cluster (2-services/cluster/hop.ts) whose hop does not check out.
  hop_refused: { status: 401, openaiType: "invalid_request_error", openaiCode: "hop_refused", anthropicType: "authentication_error" },
  node_not_serving: { status: 503, openaiType: "server_error", openaiCode: "node_not_serving", anthropicType: "overloaded_error" },
  // A rental runs on another node of the cluster, which is not live now (or does not answer): its stop, logs and notebook wait for it.
  rental_node_unreachable: { status: 503, openaiType: "server_error", openaiCode: "rental_node_unreachable", anthropicType: "overloaded_error" },
  // The model's load failed for a reason retrying does not cure soon: a corrupt file, a load past its load_timeout_s.
  model_load_failed: { status: 503, openaiType: "server_error", openaiCode: "model_load_failed", anthropicType: "api_error" },
  // nginx's "client closed request": the client left (or shutdown cut it) before the answer; only logs and metrics see it.
  request_cancelled: { status: 499, openaiType: "invalid_request_error", openaiCode: "request_cancelled", anthropicType: "invalid_request_error" },
  internal_error: { status: 500, openaiType: "server_error", openaiCode: "internal_error", anthropicType: "api_error" },
} as const satisfies Record<string, ErrorRow>;

interface ErrorRow {
  status: number;
  openaiType: string;
  openaiCode: string | null;
  anthropicType: string;
}

export type ErrorCode = keyof typeof ERROR_TABLE;

export class ApiError extends Error {
  readonly code: ErrorCode;
  readonly param: string | null;
  readonly headers: Record<string, string>;
  /** Anthropic's `error.details` (e.g. {error_code}), which its SDK reads to recover; OpenAI's envelope has none. */
  readonly details: Record<string, unknown> | null;
  constructor(code: ErrorCode, message: string, opts: { param?: string | null; headers?: Record<string, string>; details?: Record<string, unknown> } = {}) {
    super(message);
    this.name = "ApiError";
    this.code = code;
    this.param = opts.param ?? null;
    this.headers = opts.headers ?? {};
    this.details = opts.details ?? null;
  }
  get status(): number {
    return ERROR_TABLE[this.code].status;
  }
}

/** Any thrown value → ApiError; unknown failures become a 500 that names only the request id. */
export function asApiError(e: unknown, requestId: string): { error: ApiError; unexpected: boolean } {
  if (e instanceof ApiError) return { error: e, unexpected: false };
  return { error: new ApiError("internal_error", `internal server error (request id ${requestId})`), unexpected: true };
}

/** `Retry-After` in whole seconds, and `retry-after-ms`, which the OpenAI SDKs read first. */
export function retryHeaders(ms: number): Record<string, string> {
  return { "retry-after": String(Math.max(1, Math.ceil(ms / 1000))), "retry-after-ms": String(Math.max(1, Math.ceil(ms))) };
}
