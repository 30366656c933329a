import type { LlamaContext, LlamaModel, TokenBias } from "node-llama-cpp";
import { llamaAddon } from "./native/addon-path";
import { biasArrays } from "./token-bias";

// Token sampling through the appliance's llama addon (native/sampler.cpp), for the plain generation
// loop: llama.cpp's sampler chain built once per request, and a decode step's sequences sampled in
// one call, instead of node-llama-cpp's per-token configuration and an async worker per token.

export interface SamplerConfig {
  temperature: number;
  topK?: number;
  topP?: number;
  seed?: number;
}

export interface NativeSampler {
  /** Replaces the logit bias (token -> logit added; -Infinity: never). */
  setBias(tokens: Uint32Array, logits: Float32Array): void;
  dispose(): void;
}

interface Addon {
  createSampler(model: unknown, context: unknown, config: SamplerConfig): NativeSampler;
  /** Each sampler's next token from the logits at its batch logit index of the last decode step; -1: none, or a disposed sampler. */
  sampleMany(samplers: NativeSampler[], batchLogitIndexes: Int32Array): Int32Array;
}

/** Whether the built addon samples (an older build does not: ./install.sh rebuilds it). */
export function nativeSampling(): boolean {
  const addon = llamaAddon<Partial<Addon>>();
  return typeof addon?.createSampler === "function" && typeof addon.sampleMany === "function";
}

let pending: { sampler: NativeSampler; index: number; done: (token: number) => void; fail: (e: unknown) => void }[] = [];

/**
 * The next token of `sampler`'s sequence, sampled together with every other call made in the same
 * tick: node-llama-cpp asks for the tokens of one decode step's sequences one after another,
 * synchronously, so a step's samples go to the addon in one call, which spreads them over
 * threads when the vocabulary makes them costly (sampler.cpp).
 */
export function sampleInStep(sampler: NativeSampler, batchLogitIndex: number): Promise<number> {
  return new Promise((done, fail) => {
    if (pending.push({ sampler, index: batchLogitIndex, done, fail }) === 1) queueMicrotask(flush);
  });
}

/** The next tokens of `samplers`' sequences, from the logits at `batchLogitIndexes` (-1 each: none, or a disposed sampler). */
export function sampleMany(samplers: NativeSampler[], batchLogitIndexes: Int32Array): Int32Array {
  return llamaAddon<Addon>()!.sampleMany(samplers, batchLogitIndexes);
}

function flush(): void {
  const batch = pending;
  pending = [];
  try {
    const tokens = sampleMany(
      batch.map((p) => p.sampler),
      Int32Array.from(batch, (p) => p.index),
    );
    batch.forEach((p, i) => p.done(tokens[i]!));
  } catch (e) {
    for (const p of batch) p.fail(e);
  }
}

/**
 * A seed for a request that names none. Both llama.cpp's sampler and node-llama-cpp's fall back to
 * the current second, so identical requests in one second would draw identical tokens: a client
 * retrying a failed answer would get the same failure again.
 */
export function freshSeed(): number {
  return crypto.getRandomValues(new Uint32Array(1))[0]!;
}

/** A sampler for one request on `context`, or null when the addon is not built or cannot sample. */
export function createNativeSampler(model: LlamaModel, context: LlamaContext, config: SamplerConfig): NativeSampler | null {
  const addon = llamaAddon<Partial<Addon>>();
  if (typeof addon?.createSampler !== "function") return null;
  const nativeModel = (model as unknown as { _model?: unknown })._model;
  const nativeContext = (context as unknown as { _ctx?: unknown })._ctx;
  // node-llama-cpp's rounding: a seed is a whole non-negative number (taken modulo 2^32 natively)
  const seed = config.seed === undefined ? freshSeed() : Math.max(0, Math.floor(config.seed));
  return addon.createSampler(nativeModel, nativeContext, { ...config, seed });
}

/**
 * Gives `sampler` each bias it is handed, where it differs from the last one (node-llama-cpp asks
 * for the bias before every token; a forced prefix changes it per token, a caller's stays).
 */
export function biasFollower(sampler: NativeSampler): (bias: TokenBias | undefined) => void {
  let last: TokenBias | undefined;
  return (bias) => {
    if (bias === last) return;
    const arrays = (bias && biasArrays(bias)) || { tokens: new Uint32Array(0), logits: new Float32Array(0) };
    sampler.setBias(arrays.tokens, arrays.logits);
    last = bias;
  };
}
