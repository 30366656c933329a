import type { ChatJob, EngineEvent, EngineResult } from "../chat/job";

// Engine interfaces. The services above talk to these only; each engine (llama, transformers,
// diffusion) implements the one of its kind.

export interface EngineStats {
  slots: number;
  busy: number;
  queued: number;
}

export interface ChatEngine {
  readonly modelId: string;
  /** Tokens one slot can hold: prompt plus answer. */
  readonly contextSize: number;
  /** Whether the model reasons before answering (and so honours enable_thinking). */
  readonly thinks: boolean;
  readonly loaded: boolean;
  load(): Promise<void>;
  unload(): Promise<void>;
  /** Prompt tokens of `job` with the model's template and tokenizer (no context check). */
  countTokens(job: ChatJob): Promise<number>;
  /** Renders the prompt with the model's template and counts it; refuses what cannot run. */
  prepare(job: ChatJob): Promise<PreparedChat>;
  stats(): EngineStats;
}

export interface PreparedChat {
  promptTokens: number;
  /** The output cap that will apply: the request's, or what the context leaves. */
  maxTokens: number;
  /** Waits for a worker slot (bounded queue; 429 past it). */
  acquire(signal?: AbortSignal): Promise<ChatLease>;
}

export interface ChatLease {
  /** Prompt tokens this slot already held (prefix reuse). */
  readonly cachedTokens: number;
  run(onEvent: (e: EngineEvent) => void, signal: AbortSignal): Promise<EngineResult>;
  /** Idempotent; must be called whatever happened. */
  release(): void;
}
