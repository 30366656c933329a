import type { Principal } from "../accounts/types";
import type { LedgerEffect } from "../../4-store/ledger";
import type { ChatRequest } from "./request";
import { ApiError } from "../../lib/errors";
import type { Limits } from "../billing/limits";
import type { ActualUsage, Meter, Ticket } from "../billing/meter";
import type { Clock } from "../../lib/clock";
import type { EngineUse, Registry } from "../../3-engines/registry";
import type { ChatEngine, ChatLease } from "../../3-engines/types";
import { newId } from "../../lib/ids";
import type { Logger } from "../../lib/log";
import type { ChatTimer, Metrics } from "../metrics/metrics";
import { AsyncQueue } from "./async-queue";
import { aggregate, chunk, eventDelta, toUsage, usageChunk, type ChatCompletion, type ChatCompletionChunk, type CompletionIds } from "./completion";
import { toChatJob } from "./from-request";
import { decodeImages, imagesOf, type ImageInputOptions } from "../../3-engines/image-input";
import type { ChatJob } from "../../3-engines/chat-job";

// THE chat-completions service: all three wire formats end here (STYLE). It checks the request,
// has the engine render and count the prompt, reserves credit, takes a worker slot, runs the
// generation and settles the usage — and releases the slot and the reservation whatever happens.

export interface ChatCallOptions {
  requestId: string;
  /** Recorded on the usage row: "/v1/chat/completions", "/v1/responses", "/v1/messages". */
  endpoint: string;
  batch?: boolean;
  /** Client gone: stop generating. */
  signal?: AbortSignal;
  /** Pass reasoning text through as `reasoning_content` deltas (Messages `thinking` blocks). */
  includeReasoning?: boolean;
  /**
   * The caller settles (ChatRun.settle) once it has built its answer, so that what it records is
   * committed with the charge (batch lines). Without it the generation task settles by itself.
   */
  settleLater?: boolean;
}

export interface ChatRun {
  job: ChatJob;
  ids: CompletionIds;
  /** Known before the first token: for formats that announce usage up front (Messages). */
  promptTokens: number;
  cachedTokens: number;
  /** After the chunks end: the stop sequence that ended the answer, if one did. */
  stopSequence(): string | null;
  /** Typed chunks; the last one carries usage. Returning it early stops the generation. */
  chunks: AsyncGenerator<ChatCompletionChunk, void, void>;
  /** With `settleLater`, after the chunks end: charges the usage, committing `effect` with it. */
  settle(effect?: LedgerEffect): Promise<void>;
  /** With `settleLater`, when the caller will not settle (it failed): nothing is charged. Idempotent. */
  release(): Promise<void>;
}

export type ChatService = ReturnType<typeof createChatService>;

interface RunEnd {
  stopSequence: string | null;
  /** The usage to charge, once the generation ended. */
  usage: ActualUsage | null;
}

export function createChatService(deps: {
  registry: Registry;
  meter: Meter;
  clock: Clock;
  logger: Logger;
  metrics: Metrics;
  imageInput: ImageInputOptions;
  limits: Pick<Limits, "enter">;
}) {
  const { registry, meter, clock, logger, metrics, imageInput, limits } = deps;

  async function start(principal: Principal, req: ChatRequest, opts: ChatCallOptions): Promise<ChatRun> {
    const job = toChatJob(req);
    // Held until the generation ends (streams included): a reload that removes or replaces the
    // model unloads this engine only after that.
    const use = await registry.use(job.model, "chat", opts.signal, { batch: opts.batch === true });
    try {
      return await startOn(use, principal, job, opts);
    } catch (e) {
      use.release();
      throw e;
    }
  }

  async function startOn(use: EngineUse<ChatEngine>, principal: Principal, job: ChatJob, opts: ChatCallOptions): Promise<ChatRun> {
    const { manifest, engine } = use;
    const timer = metrics.chatRun(manifest.id, { batch: opts.batch });
    await takeImages(job, manifest.id, manifest.vision, imageInput);
    const prepared = await engine.prepare(job);
    const ticket = await meter.reserve(principal, {
      requestId: opts.requestId,
      model: manifest,
      endpoint: opts.endpoint,
      inputTokens: prepared.promptTokens,
      maxOutputTokens: prepared.maxTokens,
      batch: opts.batch,
    });
    let lease;
    try {
      lease = await prepared.acquire(opts.signal, { batch: opts.batch === true });
    } catch (e) {
      await ticket.release();
      throw e;
    }
    const toolIds: string[] = [];
    const ids: CompletionIds = {
      id: `chatcmpl-${newId("", 24)}`,
      created: Math.floor(clock.now() / 1000),
      model: manifest.id,
      toolCallId: (i) => (toolIds[i] ??= `call_${newId("", 24)}`),
    };
    const end: RunEnd = { stopSequence: null, usage: null };
    return {
      job,
      ids,
      promptTokens: prepared.promptTokens,
      cachedTokens: lease.cachedTokens,
      stopSequence: () => end.stopSequence,
      chunks: begin(lease, ticket, ids, opts, end, timer, use.release),
      async settle(effect) {
        if (!opts.settleLater || !end.usage) throw new Error("settle: nothing left to settle on this run");
        await ticket.settle(end.usage, effect);
      },
      release: () => ticket.release(),
    };
  }

  /**
   * Runs the generation as its own task, which alone owns the slot and the reservation: they are
   * released when it ends, whether or not anyone reads the chunks (a client that never reads, or
   * leaves, stops the generation through the signal).
   */
  function begin(
    lease: ChatLease,
    ticket: Ticket,
    ids: CompletionIds,
    opts: ChatCallOptions,
    end: RunEnd,
    timer: ChatTimer,
    releaseEngine: () => void,
  ): AsyncGenerator<ChatCompletionChunk, void, void> {
    const controller = new AbortController();
    const onAbort = () => controller.abort(opts.signal?.reason);
    if (opts.signal?.aborted) onAbort();
    else opts.signal?.addEventListener("abort", onAbort, { once: true });
    const out = new AsyncQueue<ChatCompletionChunk>();
    out.push(chunk(ids, { role: "assistant", content: "" }));
    let done = false;
    void (async () => {
      try {
        const r = await lease.run((e) => {
          timer.token();
          const delta = eventDelta(ids, e, opts.includeReasoning === true);
          if (delta) out.push(chunk(ids, delta));
        }, controller.signal);
        end.usage = { inputTokens: r.promptTokens, outputTokens: r.completionTokens, cachedTokens: r.cachedTokens };
        timer.done(r);
        // Settled even when the client left mid-way: what was computed until then (the engine
        // stopped at once, in the prompt too, and counts only the prompt tokens it decoded).
        if (!opts.settleLater) await ticket.settle(end.usage);
        if (opts.signal?.aborted) {
          // no answer for anyone to read: the request ends as cancelled (499 in the log), not as a 200
          out.fail(new ApiError("request_cancelled", "the client closed the connection before the answer was complete"));
          return;
        }
        end.stopSequence = r.stopSequence;
        out.push(chunk(ids, {}, r.finishReason));
        out.push(usageChunk(ids, toUsage(r)));
        out.close();
      } catch (e) {
        await ticket.release();
        logger.warn("chat generation failed", { request_id: opts.requestId, error: (e as Error).message });
        out.fail(e);
      } finally {
        done = true;
        lease.release();
        releaseEngine();
        opts.signal?.removeEventListener("abort", onAbort);
      }
    })();
    return (async function* () {
      try {
        yield* out;
      } finally {
        if (!done) controller.abort(new Error("stream closed"));
      }
    })();
  }

  return {
    start,
    /**
     * Prompt tokens of a request with the model's real template and tokenizer (count_tokens). Not
     * billed, but limited like the request it counts for: the key's rpm (at the edge) and its
     * requests in flight, since rendering and counting a prompt is the same work.
     */
    async countTokens(principal: Principal, req: ChatRequest): Promise<number> {
      const job = toChatJob(req);
      const leave = await limits.enter(principal);
      const use = await registry.use(job.model, "chat").catch(async (e) => {
        await leave();
        throw e;
      });
      try {
        await takeImages(job, use.manifest.id, use.manifest.vision, imageInput);
        return await use.engine.countTokens(job);
      } finally {
        await leave();
        use.release();
      }
    },
    /**
     * The non-streamed answer: the same chunks, folded. `record` (batch lines) is committed with
     * the charge, in one transaction.
     */
    async complete(principal: Principal, req: ChatRequest, opts: ChatCallOptions & { record?: (c: ChatCompletion) => LedgerEffect }): Promise<ChatCompletion> {
      const r = await start(principal, req, { ...opts, settleLater: opts.record !== undefined });
      try {
        const all: ChatCompletionChunk[] = [];
        for await (const c of r.chunks) all.push(c);
        const completion = aggregate(r.ids, all);
        if (opts.record) await r.settle(opts.record(completion));
        return completion;
      } finally {
        if (opts.record) await r.release();
      }
    },
  };
}

/** Images only for vision models; fetched and decoded before the engine counts the prompt. */
async function takeImages(job: ChatJob, modelId: string, vision: boolean, options: ImageInputOptions) {
  const images = imagesOf(job);
  if (images.length === 0) return;
  if (!vision)
    throw new ApiError("images_not_supported", `${images[0]!.param}: model "${modelId}" does not accept images (supports_vision is false)`, {
      param: images[0]!.param,
    });
  await decodeImages(job, options);
}
