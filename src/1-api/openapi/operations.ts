import { Type as T, type TSchema } from "@sinclair/typebox";
import {
  ConsoleCreateKeyRequest,
  ConsoleCreditRequest,
  ConsoleLoginRequest,
  ConsoleUpdateKeyRequest,
  ConsoleUsageQuery,
  CreateRentalRequest,
  FileUploadForm,
} from "./hand-schemas";
import { AppendMessagesRequest, CreateConversationRequest, ListConversationsQuery, UpdateConversationRequest } from "../../2-services/console/conversations";

// What the route table cannot say about an operation: its id, summary and success answer, and
// for routes that read their input by hand, the schema of that input. Keyed by Elysia's
// "METHOD path"; test/api/openapi.test.ts fails when a route has no entry or an entry no route.

export interface SuccessDoc {
  status?: number;
  description: string;
  /** Content type of the success body (application/json unless said). */
  type?: string;
  /** The SSE answer given when the body asks for `stream: true`. */
  stream?: string;
}

export interface HeaderDoc {
  name: string;
  description: string;
  required?: boolean;
}

export interface OperationDoc {
  operationId: string;
  summary: string;
  description?: string;
  /** The success answer; false for a route that only ever answers an error. */
  ok: SuccessDoc | false;
  /** A body the route reads and checks by hand (no `body` hook). */
  body?: { name: string; schema: TSchema; type: "application/json" | "multipart/form-data" };
  /** A query the route reads by hand (no `query` hook). */
  query?: TSchema;
  headers?: HeaderDoc[];
  /** The name of the path parameter a trailing `*` matches. */
  wildcard?: string;
  /** Error statuses besides those auth, input and path parameters imply. */
  errors?: number[];
}

const json = (description: string): SuccessDoc => ({ description });
const hand = (name: string, schema: TSchema) => ({ name, schema, type: "application/json" as const });
const INFERENCE = [402, 404, 503];
const ANTHROPIC_VERSION: HeaderDoc = { name: "anthropic-version", description: "Sent by Anthropic clients: the answer (and its errors) take Anthropic's shapes." };
const CSRF: HeaderDoc = { name: "X-CSRF-Token", required: true, description: "The session's CSRF token (from login or GET /console/api/session)." };

export const OPERATIONS: Record<string, OperationDoc> = {
  "GET /health": { operationId: "getHealth", summary: "Liveness, version and uptime", ok: json("`{status:\"ok\", version, uptime_s, models}`") },
  "GET /api/hello": { operationId: "getHello", summary: "Claude Code's connection probe: the same answer as /health", ok: json("`{status:\"ok\", version, uptime_s, models}`") },
  "GET /metrics": {
    operationId: "getMetrics",
    summary: "Prometheus metrics (keys of admin accounts)",
    errors: [403],
    ok: { description: "Prometheus text exposition.", type: "text/plain" },
  },
  "GET /openapi.json": { operationId: "getOpenApi", summary: "This OpenAPI 3.1 document", ok: json("The document, generated from the route table and the schemas the routes validate with.") },
  "GET /reference": { operationId: "getReference", summary: "This document as a readable page", ok: { description: "A self-contained HTML page (no scripts).", type: "text/html" } },

  "GET /v1/models": {
    operationId: "listModels",
    summary: "List the served models",
    description: "OpenAI's list envelope; each entry also carries `kind`. With `anthropic-version`, Anthropic's model list.",
    headers: [ANTHROPIC_VERSION],
    ok: json("`{object:\"list\", data:[{id, object, created, owned_by, name, kind, max_context, supports_vision?}]}`"),
  },
  "GET /v1/models/*": {
    operationId: "retrieveModel",
    summary: "Retrieve one model",
    description: "The id may contain `/` (sent as is or percent-encoded).",
    wildcard: "model",
    headers: [ANTHROPIC_VERSION],
    ok: json("One model entry."),
  },

  "POST /v1/chat/completions": {
    operationId: "createChatCompletion",
    summary: "Create a chat completion",
    errors: INFERENCE,
    ok: { description: "The chat completion.", stream: "`chat.completion.chunk` events, a usage chunk, then `data: [DONE]`." },
  },
  "POST /v1/responses": {
    operationId: "createResponse",
    summary: "Create a response (stateless)",
    description: "Translated onto chat completions; nothing is stored.",
    errors: INFERENCE,
    ok: { description: "The response object.", stream: "Typed events from `response.created` to one terminal event." },
  },
  "GET /v1/responses/:id": { operationId: "getResponse", summary: "Retrieve a response: always 404 (nothing is stored)", ok: false },
  "DELETE /v1/responses/:id": { operationId: "deleteResponse", summary: "Delete a response: always 404 (nothing is stored)", ok: false },
  "POST /v1/responses/:id/cancel": { operationId: "cancelResponse", summary: "Cancel a response: always 404 (nothing is stored)", ok: false },
  "GET /v1/responses/:id/input_items": { operationId: "listResponseInputItems", summary: "List a response's input items: always 404 (nothing is stored)", ok: false },
  "POST /v1/messages": {
    operationId: "createMessage",
    summary: "Create a message (Anthropic Messages format)",
    errors: INFERENCE,
    ok: { description: "The message.", stream: "`message_start` … `message_stop` events; a failure is an `error` event." },
  },
  "POST /v1/messages/count_tokens": { operationId: "countMessageTokens", summary: "Count a message's input tokens (not billed)", errors: [404, 503], ok: json("`{input_tokens}`") },
  "POST /v1/embeddings": { operationId: "createEmbeddings", summary: "Create embeddings", errors: INFERENCE, ok: json("OpenAI's embedding list.") },
  "POST /v1/classify": { operationId: "classify", summary: "Classify premise/hypothesis pairs (NLI)", errors: INFERENCE, ok: json("One three-class result per pair or input.") },
  "POST /v1/decisions": {
    operationId: "createDecision",
    summary: "Answer typed questions about an input from a chat model's probabilities",
    errors: INFERENCE,
    ok: json("One answer per question, in order: predicate, choice, score or refusal."),
  },
  "POST /v1/rerank": {
    operationId: "rerank",
    summary: "Rank documents by relevance to a query with a cross-encoder (Jina/Cohere shape)",
    errors: INFERENCE,
    ok: json("`{id, model, results:[{index, relevance_score, document?}], usage, meta}`, best first; `meta.truncated` lists documents cut to fit."),
  },
  "POST /v2/rerank": {
    operationId: "rerankV2",
    summary: "Rerank at Cohere's v2 path (the same service as /v1/rerank)",
    errors: INFERENCE,
    ok: json("As /v1/rerank. Errors add Cohere's top-level `message` to OpenAI's envelope."),
  },
  "POST /v1/images/generations": { operationId: "generateImages", summary: "Generate images from a prompt", errors: INFERENCE, ok: json("`{created, data:[{b64_json, seed}], size, output_format:\"png\"}`") },

  "POST /v1/files": {
    operationId: "uploadFile",
    summary: "Upload a batch input file",
    body: { name: "FileUploadForm", schema: FileUploadForm, type: "multipart/form-data" },
    errors: [413],
    ok: json("The file object."),
  },
  "GET /v1/files": { operationId: "listFiles", summary: "List this key's files", ok: json("`{object:\"list\", data, has_more, first_id, last_id}`") },
  "GET /v1/files/:id": { operationId: "retrieveFile", summary: "Retrieve a file object", ok: json("The file object.") },
  "GET /v1/files/:id/content": { operationId: "downloadFile", summary: "Download a file's content", ok: { description: "The file's bytes.", type: "application/octet-stream" } },
  "DELETE /v1/files/:id": { operationId: "deleteFile", summary: "Delete a file", ok: json("`{id, object:\"file\", deleted:true}`") },
  "POST /v1/batches": { operationId: "createBatch", summary: "Create a batch", errors: [402, 404], ok: json("The batch object.") },
  "GET /v1/batches": { operationId: "listBatches", summary: "List this key's batches, newest first", ok: json("`{object:\"list\", data, has_more, first_id, last_id}`") },
  "GET /v1/batches/:id": { operationId: "retrieveBatch", summary: "Retrieve a batch", ok: json("The batch object.") },
  "POST /v1/batches/:id/cancel": { operationId: "cancelBatch", summary: "Cancel a batch", ok: json("The batch object.") },

  "GET /api/v1/admin/models": {
    operationId: "listModelResidency",
    summary: "Which models are loaded, where, and how busy (keys of admin accounts)",
    description: "A key of any scope, of an admin account. What `appliance ps` shows.",
    errors: [403],
    ok: json(
      "`{object:\"list\", data:[{id, kind, state: loaded|loading|unloaded|failed, error (why the last load failed, else null), pinned, keep_alive_s, device, gpu_layers, context_size, slots, memory_mb:{gpu, cpu}, in_flight, waiting, idle_s, last_used}]}`",
    ),
  },
  "POST /api/v1/admin/models/*": {
    operationId: "loadOrUnloadModel",
    summary: "Load or unload a model (keys of admin accounts)",
    description:
      "The path after `models/` is `{id}/load` or `{id}/unload`; the id may contain `/`. A load is placed by the memory planner (idle models are unloaded to make room) and answers the model's status once loaded, or 503 `model_unavailable` with the planner's reason, or 503 `model_load_failed` (a model file whose GGUF header does not hold together, a load past its `load_timeout_s`). An unload answers `{id, result}`: `unloaded`, `when_idle` (requests hold it: it unloads when they end) or `not_loaded`.",
    wildcard: "model_action",
    errors: [403, 429, 503],
    ok: json("The model's status (load) or `{id, result}` (unload)."),
  },

  "GET /api/v1/gpus": { operationId: "listGpus", summary: "List the rentable GPU nodes", ok: json("`{object:\"list\", data:[gpu node]}`") },
  "POST /api/v1/rentals": {
    operationId: "createRental",
    summary: "Rent a GPU node (asynchronous: `pending`, then `running`)",
    body: hand("CreateRentalRequest", CreateRentalRequest),
    headers: [{ name: "Idempotency-Key", description: "A retry with the same key and body answers the first rental." }],
    errors: [402, 409, 422],
    ok: json("The rental."),
  },
  "GET /api/v1/rentals": { operationId: "listRentals", summary: "List this key's rentals", ok: json("`{object:\"list\", data:[rental]}`") },
  "GET /api/v1/rentals/:id": { operationId: "retrieveRental", summary: "Retrieve a rental, with its connection once running", ok: json("The rental.") },
  "GET /api/v1/rentals/:id/logs": { operationId: "getRentalLogs", summary: "The end of a rental's log", ok: { description: "Up to the last 256 KiB of the log.", type: "text/plain" } },
  "DELETE /api/v1/rentals/:id": { operationId: "stopRental", summary: "Stop a rental", ok: json("The rental, stopping or stopped.") },

  "GET /": { operationId: "rootRedirect", summary: "Redirect to the console", ok: { status: 302, description: "To /console.", type: "" } },
  "GET /console": { operationId: "getConsolePage", summary: "The web console", ok: { description: "The console's page.", type: "text/html" } },
  "GET /console/:file": { operationId: "getConsoleFile", summary: "One of the console's files (script, style)", ok: { description: "The file.", type: "*/*" } },

  "POST /console/api/login": {
    operationId: "consoleLogin",
    summary: "Sign in to the console",
    description: "Sets the session cookie. Refused from another origin; throttled after repeated failures (429).",
    body: hand("ConsoleLoginRequest", ConsoleLoginRequest),
    errors: [403, 429],
    ok: json("`{account:{id, name, role}, csrf}`"),
  },
  "POST /console/api/logout": { operationId: "consoleLogout", summary: "Sign out", ok: json("`{ok:true}`") },
  "GET /console/api/session": { operationId: "getConsoleSession", summary: "The signed-in session", ok: json("`{account:{id, name, role}, csrf}`") },
  "GET /console/api/account": { operationId: "getConsoleAccount", summary: "The account: balance and trial", ok: json("The account.") },
  "GET /console/api/keys": { operationId: "listConsoleKeys", summary: "The account's keys (never the full key)", ok: json("`{data:[key]}`") },
  "POST /console/api/keys": {
    operationId: "createConsoleKey",
    summary: "Create a key (the full key is shown once)",
    body: hand("ConsoleCreateKeyRequest", ConsoleCreateKeyRequest),
    errors: [409],
    ok: json("`{key, info}`"),
  },
  "POST /console/api/keys/:id/revoke": { operationId: "revokeConsoleKey", summary: "Revoke a key", ok: json("`{info}`") },
  "POST /console/api/keys/:id/rotate": { operationId: "rotateConsoleKey", summary: "Rotate a key (the new key is shown once)", ok: json("`{key, info}`") },
  "PATCH /console/api/keys/:id": {
    operationId: "updateConsoleKey",
    summary: "Toggle a key's rental scope or set its max_active_rentals",
    body: hand("ConsoleUpdateKeyRequest", ConsoleUpdateKeyRequest),
    ok: json("`{info}`"),
  },
  "GET /console/api/usage": { operationId: "getConsoleUsage", summary: "Usage per day and the last 50 requests", query: ConsoleUsageQuery, ok: json("`{days, recent}`") },
  "GET /console/api/requests/:id": {
    operationId: "getConsoleRequestUsage",
    summary: "What one of the account's requests used and cost, once settled (404 before)",
    ok: json("`{request_id, created_at, model, endpoint, input_tokens, output_tokens, cached_tokens, images, trial_tokens, cost_usd}`"),
  },
  "POST /console/api/v1/*": {
    operationId: "consoleInference",
    summary:
      "The inference API as the signed-in account (the console's Chat and Playground): POST /v1/chat/completions, /v1/images/generations, /v1/decisions or /v1/rerank with the session and its X-CSRF-Token, served through the account's console key",
    ok: { description: "The endpoint's own answer: JSON, or server-sent events for a streamed chat.", type: "application/json" },
  },
  "GET /console/api/batches": { operationId: "listConsoleBatches", summary: "The account's batches", ok: json("`{data:[batch]}`") },
  "POST /console/api/batches/:id/cancel": { operationId: "cancelConsoleBatch", summary: "Cancel one of the account's batches", ok: json("The batch.") },
  "GET /console/api/files/:id/content": { operationId: "downloadConsoleFile", summary: "Download one of the account's files", ok: { description: "The file, as an attachment.", type: "application/octet-stream" } },
  "GET /console/api/gpus": { operationId: "listConsoleGpus", summary: "The rentable GPU nodes", ok: json("`{data:[gpu node]}`") },
  "GET /console/api/rentals": { operationId: "listConsoleRentals", summary: "The account's rentals", ok: json("`{data:[rental]}`") },
  "POST /console/api/rentals/:id/stop": { operationId: "stopConsoleRental", summary: "Stop one of the account's rentals", ok: json("The rental.") },
  "GET /console/api/models": {
    operationId: "listConsoleModels",
    summary: "The served models, with their residency (state, device, memory, idle time, requests in flight)",
    ok: json("`{data:[model]}`"),
  },
  "GET /console/api/conversations": {
    operationId: "listConsoleConversations",
    summary: "The account's chat conversations, most recently changed first",
    query: ListConversationsQuery,
    ok: json("`{data:[{id, title, model, created_at, updated_at, message_count}]}`"),
  },
  "POST /console/api/conversations": {
    operationId: "createConsoleConversation",
    summary: "Start a chat conversation",
    description: "409 `conflict` past 1,000 conversations per account.",
    body: hand("CreateConversationRequest", CreateConversationRequest),
    errors: [409],
    ok: json("`{id, title, model, settings, created_at, updated_at, message_count, messages: []}`"),
  },
  "GET /console/api/conversations/:id": {
    operationId: "getConsoleConversation",
    summary: "One conversation with its messages",
    ok: json("`{id, title, model, settings, created_at, updated_at, message_count, messages: [{seq, role, content, …}]}`"),
  },
  "PATCH /console/api/conversations/:id": {
    operationId: "updateConsoleConversation",
    summary: "Rename a conversation, or change its model or settings",
    body: hand("UpdateConversationRequest", UpdateConversationRequest),
    ok: json("The conversation, without its messages."),
  },
  "DELETE /console/api/conversations/:id": { operationId: "deleteConsoleConversation", summary: "Delete a conversation and its messages", ok: json("`{id, deleted: true}`") },
  "POST /console/api/conversations/:id/messages": {
    operationId: "appendConsoleMessages",
    summary: "Keep the first `keep` messages and append up to 4",
    description: "One transaction: 409 `conflict` when the conversation holds fewer than `keep` messages (it changed elsewhere); 400 past 32 MiB of messages, nothing written.",
    body: hand("AppendMessagesRequest", AppendMessagesRequest),
    errors: [409],
    ok: json("`{conversation, messages: [{seq, …}]}` (the appended ones)"),
  },
  "GET /console/api/docs": { operationId: "listConsoleDocs", summary: "The manual's pages (web/docs/), in the contents' order, with their titles", ok: json("`{object:\"list\", data:[{name, title}]}`") },
  "GET /console/api/docs/:page": {
    operationId: "getConsoleDoc",
    summary: "One page of the manual, as a tree the console builds",
    description: "`{name, title, tree}`: each node a string or `[tag, attributes, ...children]`, from a fixed set of tags and attributes (no HTML). 404 `not_found` for a name that is no page.",
    ok: json("The page."),
  },
  "POST /console/api/admin/models/:id/load": {
    operationId: "consoleLoadModel",
    summary: "Load a model (admin)",
    description: "The id percent-encoded (`%2F` for `/`). Placed by the memory planner; 503 `model_unavailable` with its reason when it cannot fit.",
    errors: [429, 503],
    ok: json("The model's status once loaded."),
  },
  "POST /console/api/admin/models/:id/unload": {
    operationId: "consoleUnloadModel",
    summary: "Unload a model (admin)",
    description: "The id percent-encoded (`%2F` for `/`). Requests holding it finish first (`when_idle`).",
    ok: json("`{id, result: \"unloaded\" | \"when_idle\" | \"not_loaded\"}`"),
  },
  "GET /console/api/admin/accounts": { operationId: "listAccounts", summary: "Every account (admin)", ok: json("`{data:[account]}`") },
  "POST /console/api/admin/accounts/:name/credit": {
    operationId: "creditAccount",
    summary: "Add credit to an account (admin)",
    body: hand("ConsoleCreditRequest", ConsoleCreditRequest),
    ok: json("The account."),
  },
  // Model pulls from the console (src/1-api/console/admin-models.ts; web/docs/models.md "Pulling from the console").
  "GET /console/api/admin/catalogue": {
    operationId: "consoleCatalogue",
    summary: "The models catalogue with sizes and what is downloaded (admin)",
    ok: json("`{models_dir, data:[{id, name, kind, description, source, bytes, pullable, status, configured, pulling}]}`"),
  },
  "GET /console/api/admin/pulls": { operationId: "listConsolePulls", summary: "This server's model pulls, newest first (admin)", ok: json("`{data:[pull]}`") },
  "POST /console/api/admin/pulls": {
    operationId: "startConsolePull",
    summary: "Pull a model into the models dir (admin)",
    description:
      "Body `{source}`: a catalogue id or `hf:OWNER/REPO[@REV][:QUANT|/FILE]`, resolved at once (400 naming what is wrong with it; 502 when the hub cannot be reached). Downloads resume and are checked against their sizes and SHA-256; one pull per model at a time (409).",
    errors: [409, 502],
    ok: { status: 202, description: "The pull: `{id, source, model, state, files, bytes_done, bytes_total, rate, eta_s, …}`." },
  },
  "GET /console/api/admin/pulls/:id": { operationId: "getConsolePull", summary: "One model pull and its progress (admin)", ok: json("The pull.") },
  "POST /console/api/admin/pulls/:id/cancel": {
    operationId: "cancelConsolePull",
    summary: "Cancel a model pull, keeping what it downloaded (admin)",
    errors: [409],
    ok: json("The pull, cancelled."),
  },
  "POST /console/api/admin/pulls/:id/add": {
    operationId: "addConsolePull",
    summary: "Add a pulled model to the config file and reload it (admin)",
    description: "As `appliance models add`; body `{replace?: boolean}` replaces an entry of the same id. 409 when the pull has not finished, the model is in the config already, or its folder makes no model.",
    errors: [409],
    ok: json("`{pull, file, created, replaced, manifest, reload:{added, removed, replaced}, served}`"),
  },
  "GET /console/api/admin/models/:id/plan": {
    operationId: "consoleModelPlan",
    summary: "Where a model would load now, and with how much memory (admin)",
    description: "The id percent-encoded (`%2F` for `/`). `fits`: together, alone (once the idle models in `unloads` unload), refused (with `reason`), unread, or loaded (its placement).",
    ok: json("`{id, kind, state, fits, device, gpu_layers, layers, context_size, slots, memory_mb:{gpu, cpu}, unloads, devices}`"),
  },
};

/** The console API's state-changing calls need the CSRF header (requireSession in src/1-api/console/session.ts). */
export function needsCsrf(method: string, path: string): boolean {
  return path.startsWith("/console/api/") && path !== "/console/api/login" && method !== "GET";
}

export const CSRF_HEADER = CSRF;

/** API families, by path prefix (the first match wins). */
export const TAGS: { tag: string; prefix: string; description: string }[] = [
  { tag: "Chat completions", prefix: "/v1/chat", description: "The canonical chat format (spec §2.4)." },
  { tag: "Responses", prefix: "/v1/responses", description: "Stateless Responses format, translated onto chat completions (spec §2.5)." },
  { tag: "Messages", prefix: "/v1/messages", description: "Anthropic's Messages format, translated onto chat completions (spec §2.6). Errors use Anthropic's envelope." },
  { tag: "Embeddings", prefix: "/v1/embeddings", description: "Spec §2.9." },
  { tag: "Classification", prefix: "/v1/classify", description: "Three-class NLI (spec §2.7)." },
  { tag: "Decisions", prefix: "/v1/decisions", description: "Typed questions answered by a chat model's probabilities (OpenAI's Decisions API; issue 47)." },
  { tag: "Rerank", prefix: "/v1/rerank", description: "Documents ranked by a cross-encoder reranker (issue 47)." },
  { tag: "Rerank", prefix: "/v2/rerank", description: "Documents ranked by a cross-encoder reranker (issue 47)." },
  { tag: "Images", prefix: "/v1/images", description: "Text to image (spec §2.8)." },
  { tag: "Files", prefix: "/v1/files", description: "Batch inputs and results (spec §2.10)." },
  { tag: "Batches", prefix: "/v1/batches", description: "JSONL batches at half price (spec §2.10)." },
  { tag: "Models", prefix: "/v1/models", description: "The served models (spec §2.1)." },
  { tag: "Admin", prefix: "/api/v1/admin", description: "Keys of admin accounts, of any scope: the models' residency (`appliance ps`)." },
  { tag: "GPU rentals", prefix: "/api/v1", description: "Needs a key with the `rental` scope (spec §2.2, §2.3)." },
  { tag: "Console API", prefix: "/console/api", description: "What the web console calls: session cookie, never an API key." },
  { tag: "Console", prefix: "/console", description: "The web console's pages and files." },
  { tag: "Service", prefix: "/", description: "Health, metrics, this document, the root redirect." },
];

export function tagOf(path: string): string {
  return TAGS.find((t) => t.prefix === "/" || path === t.prefix || path.startsWith(`${t.prefix}/`))!.tag;
}

/** A schema for a path parameter Elysia passes as a string. */
export const PathString = T.String({ minLength: 1 });
