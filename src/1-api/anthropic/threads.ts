import { ApiError } from "../../lib/errors";
import type { MessagesResponse } from "./from-chat";
import type { MessagesInput } from "./schema";

// Message threads (Anthropic's beta message-threads-2026-08-12, issue 42): `thread: {type:"create"}`
// asks the server to hold the conversation under the reply's id; `thread: {type:"continue",
// previous_message_id}` sends only the new messages, and the server answers the thread's history
// followed by them, with the thread's `system` and `tools`. A continue is answered exactly as the
// whole conversation sent without `thread` would be, and billed the same (the full prompt it ran).
// Pure: what a thread field means, how a continue's request is built, and the errors, with the
// `error.details.error_code` the Anthropic SDK reads (ThreadState.recoversFrom).

export type ThreadRequest = { type: "create" } | { type: "continue"; previousMessageId: string };

/** What a continue takes from its thread: the fields it was created with and every message so far. */
export interface HeldThread {
  model: string;
  system: unknown;
  tools: unknown;
  messages: unknown[];
}

const bad = (param: string, message: string) => new ApiError("invalid_request", `${param}: ${message}`, { param });

/** `thread` as sent (the schema checked its shape): none, create or continue. */
export function parseThread(v: { type: string; previous_message_id?: string | null } | null | undefined): ThreadRequest | null {
  if (v == null) return null;
  if (v.type === "create") {
    if (v.previous_message_id != null) throw bad("thread.previous_message_id", 'is sent only with type "continue"');
    return { type: "create" };
  }
  if (v.type === "continue") {
    if (!v.previous_message_id) throw bad("thread.previous_message_id", 'is required when type is "continue"');
    return { type: "continue", previousMessageId: v.previous_message_id };
  }
  throw bad("thread.type", `must be "create" or "continue" (got "${v.type}")`);
}

/** The request without `thread`: what the translator reads (it refuses a `thread` it was not meant to see). */
export function withoutThread(req: MessagesInput): MessagesInput {
  const { thread: _, ...rest } = req as MessagesInput & { thread?: unknown };
  return rest;
}

/** JSON with object keys sorted: a repeated `tools` list is the same whatever order its keys were written in. */
function canonical(v: unknown): string {
  return JSON.stringify(v, (_k, x) =>
    x && typeof x === "object" && !Array.isArray(x) ? Object.fromEntries(Object.entries(x as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) : x,
  );
}

/** An absent, null, empty string or empty list of system blocks or tools is one value: none. */
const none = (v: unknown) => v == null || v === "" || (Array.isArray(v) && v.length === 0);
const same = (a: unknown, b: unknown) => (none(a) && none(b)) || (!none(a) && !none(b) && canonical(a) === canonical(b));

/**
 * The thread's fingerprint, as a continue must repeat it: `model` always (the history was answered
 * by that model), `system` and `tools` only if the request sends them again *(choice: the SDK leaves
 * them out; a client that repeats them unchanged is answered, one that changes them is refused: the
 * thread keeps what it was created with)*. The names of the fields that differ.
 */
export function fingerprintMismatch(thread: HeldThread, req: MessagesInput): string[] {
  const out: string[] = [];
  if (req.model !== thread.model) out.push("model");
  if (req.system != null && !same(req.system, thread.system)) out.push("system");
  if (req.tools != null && !same(req.tools, thread.tools)) out.push("tools");
  return out;
}

/** A continue's request: the thread's system, tools and messages, then the client's own messages and every other field. */
export function continueRequest(thread: HeldThread, req: MessagesInput): MessagesInput {
  const rest = withoutThread(req);
  const out = { ...rest, messages: [...(thread.messages as MessagesInput["messages"]), ...req.messages] } as MessagesInput;
  delete out.system;
  delete out.tools;
  if (!none(thread.system)) out.system = thread.system as MessagesInput["system"];
  if (!none(thread.tools)) out.tools = thread.tools as MessagesInput["tools"];
  return out;
}

/** The reply as the next turn's history holds it: what the SDK would send back (ThreadState toMessageParam). */
export function replyMessage(reply: MessagesResponse): { role: "assistant"; content: MessagesResponse["content"] } {
  return { role: "assistant", content: reply.content };
}

/**
 * An error about a continue's request named as the client sent it: its messages follow the thread's
 * `offset` held ones, so `messages[offset + i]` is its `messages[i]`; an earlier index is in the
 * thread's history, which the client did not send this time.
 */
export function relabelContinued(e: unknown, offset: number): unknown {
  if (offset === 0 || !(e instanceof ApiError) || !e.param) return e;
  const m = /^messages\[(\d+)\]/.exec(e.param);
  if (!m) return e;
  const i = Number(m[1]);
  const held = i < offset;
  const head = held ? "thread.previous_message_id" : `messages[${i - offset}]`;
  const param = held ? head : head + e.param.slice(m[0].length);
  const message = held ? `${head}: in the thread's history, ${e.message}` : e.message.startsWith(e.param) ? param + e.message.slice(e.param.length) : e.message;
  return new ApiError(e.code, message, { param, headers: e.headers, ...(e.details ? { details: e.details } : {}) });
}

// The errors, each with the error_code the SDK reads from error.details.

const threadError = (code: "thread_not_found" | "thread_already_continued" | "thread_continue_in_flight", message: string) =>
  new ApiError(code, `thread.previous_message_id: ${message}`, { param: "thread.previous_message_id", details: { error_code: code } });

export const threadErrors = {
  notFound: (id: string | null, why?: string) =>
    threadError(
      "thread_not_found",
      why
        ? `${why}; send the whole conversation without \`thread\``
        : `no thread of this key continues from "${id}" (never created here, expired, dropped past the key's bounds, or another key's); send the whole conversation with thread {"type": "create"}`,
    ),
  alreadyContinued: (id: string) =>
    threadError("thread_already_continued", `"${id}" was already continued, and each reply can be continued once; continue from the thread's latest reply id`),
  inFlight: (id: string) =>
    threadError("thread_continue_in_flight", `another request is still continuing from "${id}"; wait for it and continue from its reply, or send the whole conversation with thread {"type": "create"}`),
  mismatch: (fields: string[]) =>
    new ApiError(
      "thread_fingerprint_mismatch",
      `${fields[0]}: ${fields.map((f) => `\`${f}\``).join(" and ")} must stay as the thread was created with; leave system and tools out of a continue, or send the whole conversation with thread {"type": "create"} to change them`,
      { param: fields[0]!, details: { error_code: "thread_fingerprint_mismatch" } },
    ),
  /** No `unsupported` list: that names request fields, and what is refused here is the thread's size or the server's setting. */
  unsupported: (why: string) =>
    new ApiError("thread_unsupported", `thread: ${why}; send the whole conversation without \`thread\``, { param: "thread", details: { error_code: "thread_unsupported_request" } }),
};
