import type { Principal } from "../../2-services/accounts/types";
import type { Clock } from "../../lib/clock";
import type { Config } from "../../lib/config";
import { newId } from "../../lib/ids";
import type { Logger } from "../../lib/log";
import { jsonBytes, type ThreadBounds, type ThreadStore } from "../../4-store/threads";
import type { MessagesResponse } from "./from-chat";
import { continueRequest, fingerprintMismatch, parseThread, replyMessage, threadErrors, withoutThread } from "./threads";
import type { MessagesInput } from "./schema";

// One turn of /v1/messages against the thread store: a continue claims its thread (one request at a
// time may continue a reply, and each reply once), the turn is answered, and then either the reply
// is kept — whole, before the client can read `message_stop` — or the claim is released (an error,
// a cancelled or cut stream): the server holds the whole reply or none of it.

export interface ThreadsDeps {
  store: ThreadStore;
  clock: Clock;
  logger: Logger;
  /** [threads], read per request (SIGHUP applies it in place). */
  settings: () => Config["threads"];
  /** server.max_body_mb in bytes: a thread never holds more than a client could send in one request. */
  maxBodyBytes: number;
}

export interface ThreadTurn {
  /** Whether the request named a thread: only then is its reply kept. */
  threaded: boolean;
  /** The request to answer: for a continue, the thread's system, tools and messages, then the client's. */
  request: MessagesInput;
  /** How many of request.messages the thread held (errors are named as the client sent them: relabelContinued). */
  offset: number;
  /** Keeps the reply: a create holds the conversation under its id, a continue moves the thread to it. */
  keep(reply: MessagesResponse): Promise<void>;
  /** The turn ends without a reply to keep: a continue's claim ends. Idempotent, nothing once keep began, never rejects. */
  release(): Promise<void>;
}

/** A claim outlives a turn only if its process died: then another continue may take the reply after this. */
const CLAIM_LEASE_MS = 15 * 60_000;

const unthreaded = (request: MessagesInput): ThreadTurn => ({ threaded: false, request, offset: 0, keep: async () => {}, release: async () => {} });

function boundsOf(deps: ThreadsDeps): ThreadBounds {
  const s = deps.settings();
  const maxBytes = Math.floor(s.max_mb_per_key * 1024 * 1024);
  return { maxThreads: s.max_per_key, maxBytes, maxThreadBytes: Math.min(maxBytes, deps.maxBodyBytes) };
}

const sizeOf = (messages: unknown[]) => messages.reduce<number>((n, m) => n + jsonBytes(m), 0);
const tooLarge = (bytes: number, max: number) =>
  threadErrors.unsupported(`the thread would hold ${bytes} bytes, more than the ${max} one thread may hold on this server ([threads] max_mb_per_key, server.max_body_mb)`);

/** The thread field of a /v1/messages request resolved against the store; throws its errors. */
export async function beginThreadTurn(deps: ThreadsDeps | undefined, principal: Principal, requestId: string, body: MessagesInput): Promise<ThreadTurn> {
  const thread = parseThread(body.thread);
  if (!thread) return unthreaded(body);
  if (!deps?.settings().enabled) throw disabled(thread.type);
  const bounds = boundsOf(deps);
  const now = deps.clock.now();
  const expiresAt = () => deps.clock.now() + deps.settings().ttl_s * 1000;

  if (thread.type === "create") {
    const request = withoutThread(body);
    const bytes = jsonBytes(request.system) + jsonBytes(request.tools) + sizeOf(request.messages);
    if (bytes > bounds.maxThreadBytes) throw tooLarge(bytes, bounds.maxThreadBytes);
    let done = false;
    return {
      threaded: true,
      request,
      offset: 0,
      async keep(reply) {
        // Released first (the stream was cancelled as it ended): the client never read message_stop.
        if (done) return;
        done = true;
        const outcome = await deps.store.create(
          {
            id: newId("thr_"),
            keyId: principal.keyId,
            model: request.model,
            system: request.system,
            tools: request.tools,
            messages: [...request.messages.map((body) => ({ body })), { body: replyMessage(reply), replyId: reply.id }],
            headId: reply.id,
            now: deps.clock.now(),
            expiresAt: expiresAt(),
          },
          boundsOf(deps),
        );
        if (outcome !== "kept") deps.logger.info("message thread not kept", { request_id: requestId, reason: outcome });
      },
      release: async () => void (done = true),
    };
  }

  const id = thread.previousMessageId;
  const found = await deps.store.claim({ keyId: principal.keyId, messageId: id, owner: requestId, now, leaseUntil: now + CLAIM_LEASE_MS });
  if ("miss" in found) throw missError(found.miss, id);
  const held = found.thread;
  let done = false;
  // Never rejects (it runs from a stream's cancel): a claim it could not end lapses with its lease.
  const release = async () => {
    if (done) return;
    done = true;
    await deps.store.release(held.id, requestId).catch((e) => deps.logger.warn("message thread claim not released", { request_id: requestId, thread: held.id, error: (e as Error).message }));
  };
  try {
    const mismatch = fingerprintMismatch(held, body);
    if (mismatch.length) throw threadErrors.mismatch(mismatch);
    const bytes = held.bytes + sizeOf(body.messages);
    if (bytes > bounds.maxThreadBytes) throw tooLarge(bytes, bounds.maxThreadBytes);
  } catch (e) {
    await release();
    throw e;
  }
  return {
    threaded: true,
    request: continueRequest(held, body),
    offset: held.messages.length,
    async keep(reply) {
      if (done) return;
      done = true;
      const outcome = await deps.store.advance(
        {
          threadId: held.id,
          owner: requestId,
          messages: [...body.messages.map((body) => ({ body })), { body: replyMessage(reply), replyId: reply.id }],
          headId: reply.id,
          now: deps.clock.now(),
          expiresAt: expiresAt(),
        },
        boundsOf(deps),
      );
      if (outcome !== "kept") deps.logger.info("message thread not kept", { request_id: requestId, thread: held.id, reason: outcome });
    },
    release,
  };
}

/**
 * count_tokens with a thread: a continue counts the prompt it would run (the thread's history and
 * the new messages) without claiming the thread; a create counts the request as sent.
 */
export async function threadForCount(deps: ThreadsDeps | undefined, principal: Principal, body: MessagesInput): Promise<{ request: MessagesInput; offset: number }> {
  const thread = parseThread(body.thread);
  if (!thread) return { request: body, offset: 0 };
  if (!deps?.settings().enabled) throw disabled(thread.type);
  if (thread.type === "create") return { request: withoutThread(body), offset: 0 };
  const found = await deps.store.read({ keyId: principal.keyId, messageId: thread.previousMessageId, now: deps.clock.now() });
  if ("miss" in found) throw missError(found.miss, thread.previousMessageId);
  const mismatch = fingerprintMismatch(found.thread, body);
  if (mismatch.length) throw threadErrors.mismatch(mismatch);
  return { request: continueRequest(found.thread, body), offset: found.thread.messages.length };
}

function missError(miss: "not_found" | "already_continued" | "in_flight", id: string) {
  return miss === "in_flight" ? threadErrors.inFlight(id) : miss === "already_continued" ? threadErrors.alreadyContinued(id) : threadErrors.notFound(id);
}

/** [threads] enabled = false: the codes after which the SDK sends the whole conversation unthreaded. */
function disabled(type: "create" | "continue") {
  const why = "this server keeps no message threads ([threads] enabled = false)";
  return type === "continue" ? threadErrors.notFound(null, why) : threadErrors.unsupported(why);
}
