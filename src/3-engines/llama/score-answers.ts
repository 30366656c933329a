import type { LlamaModel } from "node-llama-cpp";
import { ApiError } from "../../lib/errors";
import type { PoolSlot, SlotPool } from "../slots";
import type { ScoredAnswers } from "../types";
import type { DecodeLoop, LoopSlot } from "./decode-loop";

// A chat engine's answers scored (issue 47, /v1/decisions): the log-probability the model gives each
// answer text as the start of its reply to a rendered prompt, chained through its own next-token
// distributions (native/score.cpp); nothing is generated. The prompt is read on the decode loop
// beside other requests and stays in the slot's cache, so questions on one input share its reading.
// A prompt with images is primed first (the projector decodes each image's embeddings at its
// positions, vision/projector.ts), exactly as a generation's prompt is.

export interface ScoreOptions {
  batch?: boolean;
  signal?: AbortSignal;
  /** token → logit added (tests make an answer certain with it) */
  bias?: ReadonlyMap<number, number>;
  /** The request's prompt_cache_key: which slot it prefers. */
  cacheKey?: string;
}

export async function scoreAnswers<S extends PoolSlot & LoopSlot>(
  s: { model: LlamaModel; contextSize: number; pool: SlotPool<S>; loop: DecodeLoop },
  promptTokens: number[],
  answers: readonly string[],
  o: ScoreOptions,
  /** Brings the slot's cache up to the prompt's last image; returns the prompt tokens it then holds. */
  prime?: (slot: S, batch: boolean) => Promise<number>,
): Promise<ScoredAnswers> {
  const continuations = answers.map((a) => s.model.tokenize(a, false) as number[]);
  const longest = Math.max(0, ...continuations.map((c) => c.length));
  if (promptTokens.length + longest > s.contextSize)
    throw new ApiError("context_length_exceeded", `this model's context window is ${s.contextSize} tokens; the input and question take ${promptTokens.length} and the longest answer ${longest} more`, {
      param: "input",
    });
  const lease = await s.pool.acquire(promptTokens, o.signal, { batch: o.batch === true, ...(o.cacheKey !== undefined ? { key: o.cacheKey } : {}) });
  try {
    const cachedTokens = Math.max(0, Math.min(lease.reusable, promptTokens.length - 1));
    const bias = o.bias?.size ? { tokens: Uint32Array.from(o.bias.keys()), logits: Float32Array.from(o.bias.values()) } : undefined;
    const nPast = prime ? await prime(lease.slot, o.batch === true) : cachedTokens;
    const logprobs = await s.loop.score(lease.slot, promptTokens, nPast, continuations, { batch: o.batch === true, ...(bias ? { bias } : {}) });
    return { logprobs: [...logprobs], promptTokens: promptTokens.length, cachedTokens, answerTokens: continuations };
  } finally {
    lease.release();
  }
}
