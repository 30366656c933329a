import type { LlamaContext, LlamaModel } from "node-llama-cpp";
import { llamaAddon } from "./native/addon-path";

// Token sampling on the JavaScript thread through the appliance's llama addon (native/sampler.cpp),
// for the plain generation loop: llama.cpp's sampler chain built once per request, a few
// microseconds per token, instead of node-llama-cpp's per-token configuration and async worker.

export interface SamplerConfig {
  temperature: number;
  topK?: number;
  topP?: number;
  minP?: number;
  seed?: number;
}

export interface NativeSampler {
  /** Replaces the logit bias (token -> logit added; -Infinity: never). */
  setBias(tokens: Uint32Array, logits: Float32Array): void;
  /** The next token from the logits at `batchLogitIndex` of the last decode step; -1 if there are none. */
  sample(batchLogitIndex: number): number;
  dispose(): void;
}

interface Addon {
  createSampler(model: unknown, context: unknown, config: SamplerConfig): NativeSampler;
}

/** Whether the built addon samples (an older build does not: ./install.sh rebuilds it). */
export function nativeSampling(): boolean {
  return typeof llamaAddon<Partial<Addon>>()?.createSampler === "function";
}

/** A sampler for one request on `context`, or null when the addon is not built or cannot sample. */
export function createNativeSampler(model: LlamaModel, context: LlamaContext, config: SamplerConfig): NativeSampler | null {
  const addon = llamaAddon<Partial<Addon>>();
  if (typeof addon?.createSampler !== "function") return null;
  const nativeModel = (model as unknown as { _model?: unknown })._model;
  const nativeContext = (context as unknown as { _ctx?: unknown })._ctx;
  // node-llama-cpp's rounding: a seed is a whole non-negative number (taken modulo 2^32 natively)
  const seed = config.seed === undefined ? undefined : Math.max(0, Math.floor(config.seed));
  return addon.createSampler(nativeModel, nativeContext, { ...config, ...(seed === undefined ? {} : { seed }) });
}
