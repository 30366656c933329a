import type { ChatJob, EngineEvent, EngineResult } from "./chat-job";
import type { LoadSettings } from "./planner/types";

// Engine interfaces. The services above talk to these only; each engine (llama, transformers,
// diffusion) implements the one of its kind.

export interface EngineStats {
  slots: number;
  busy: number;
  /** Live requests waiting for a slot. */
  queued: number;
  /** Batch lines waiting for a slot. */
  batchQueued?: number;
}

export interface ChatEngine {
  readonly modelId: string;
  /** Tokens one slot can hold: prompt plus answer. */
  readonly contextSize: number;
  /** Whether the model reasons before answering (and so honours enable_thinking). */
  readonly thinks: boolean;
  readonly loaded: boolean;
  load(settings?: LoadSettings): Promise<void>;
  unload(): Promise<void>;
  /** Prompt tokens of `job` with the model's template and tokenizer (no context check). */
  countTokens(job: ChatJob): Promise<number>;
  /** Renders the prompt with the model's template and counts it; refuses what cannot run. */
  prepare(job: ChatJob): Promise<PreparedChat>;
  /**
   * The log-probability of each answer text as the start of the model's reply to `job`, from its
   * own next-token distributions (nothing generated): /v1/decisions (issue 47).
   */
  score?(job: ChatJob, answers: readonly string[], o?: { batch?: boolean; signal?: AbortSignal; bias?: ReadonlyMap<number, number> }): Promise<ScoredAnswers>;
  stats(): EngineStats;
}

export interface ScoredAnswers {
  logprobs: number[];
  promptTokens: number;
  cachedTokens: number;
  /** Each answer's tokens, as scored. */
  answerTokens: number[][];
}

export interface PreparedChat {
  promptTokens: number;
  /** The output cap that will apply: the request's, or what the context leaves. */
  maxTokens: number;
  /**
   * Waits for a worker slot (bounded queue; 429 past it). Batch work waits behind every live
   * request, without a bound or a time limit (spec §8 "Batch and limits").
   */
  acquire(signal?: AbortSignal, opts?: { batch?: boolean }): Promise<ChatLease>;
}

export interface ChatLease {
  /** Prompt tokens this slot already held (prefix reuse). */
  readonly cachedTokens: number;
  run(onEvent: (e: EngineEvent) => void, signal: AbortSignal): Promise<EngineResult>;
  /** Idempotent; must be called whatever happened. */
  release(): void;
}

/** Where a model computes: the CPU, or a GPU through CUDA or Vulkan (llama.cpp's backends) or WebGPU (ONNX Runtime's, over Vulkan). */
export type ComputeDevice = "cpu" | "cuda" | "vulkan" | "webgpu";

/** Where a loaded model's layers are, for /metrics and the start log. */
export interface DevicePlacement {
  device: ComputeDevice;
  /** Names of the GPUs the backend computes on ([] on the CPU). */
  gpus: readonly string[];
  /** Layers offloaded to the GPU, of `layers`. */
  gpuLayers: number;
  layers: number;
  /** The device's memory as the backend reports it (null on the CPU). */
  memory: { used: number; total: number } | null;
}

/** Common to every engine: a model that loads at start or on first use and can be unloaded. */
export interface ModelEngine {
  readonly modelId: string;
  readonly loaded: boolean;
  /** Where the loaded model computes (undefined while not loaded); GPU use reserves GPUs from rentals. */
  readonly device?: ComputeDevice;
  /** Names of the GPUs a loaded model computes on (engines on a Vulkan device say; rentals match them). */
  readonly gpus?: readonly string[];
  /** Where a loaded model's layers are and the device's memory now (undefined while not loaded). */
  placement?(): Promise<DevicePlacement | undefined>;
  /** Loads the model; `settings` are the memory planner's choice (chat engines apply them; others compute where they were made for). */
  load(settings?: LoadSettings): Promise<void>;
  unload(): Promise<void>;
  /** Slot use, for engines that have slots (chat, image). */
  stats?(): EngineStats;
  /** Answers the live requests waiting for a slot with `reason` (at shutdown), for engines with slots. */
  refuseWaiting?(reason: unknown): void;
}

/** One text to embed: a string, or token ids the caller already has (OpenAI allows both). */
export type EmbeddingInput = string | number[];

export interface EmbeddingEngine extends ModelEngine {
  /** Vector length (384 for the spec's model). */
  readonly dimensions: number;
  /** Longest input in tokens; longer ones are refused, never truncated. */
  readonly maxTokens: number;
  /** Token ids of each input as the model will see them (special tokens included). */
  /** With `maxTokens`: stops after the first input over it (the rest are not tokenized, nor returned). */
  tokenize(inputs: EmbeddingInput[], maxTokens?: number): Promise<number[][]>;
  /** Normalised vectors, one per input, from already tokenized inputs (micro-batched). */
  embed(tokens: number[][], signal?: AbortSignal): Promise<Float32Array[]>;
}

/** A classifier item: a premise/hypothesis pair, or a raw string the caller formatted. */
export type ClassifyItem = { premise: string; hypothesis: string } | { text: string };

/** A tokenized classifier item: ids, and segment ids when the item is a pair. */
export interface TokenizedItem {
  ids: number[];
  /** token_type_ids (0 … 0 1 … 1 for a pair); absent for a single sequence. */
  typeIds?: number[];
}

export interface ClassifierEngine extends ModelEngine {
  readonly maxTokens: number;
  /** Each item's tokens: pairs through the tokenizer's own (text, text_pair) template. */
  /** With `maxTokens`: stops after the first item over it (the rest are not tokenized, nor returned). */
  tokenize(items: ClassifyItem[], maxTokens?: number): Promise<TokenizedItem[]>;
  /** Probabilities in the fixed order [contradiction, entailment, neutral], whatever the model's id2label. */
  classify(items: TokenizedItem[], signal?: AbortSignal): Promise<[number, number, number][]>;
}

/** A tokenized (query, document) pair for a cross-encoder; `cut` tokens were cut from the document's end. */
export interface RerankPair extends TokenizedItem {
  /** Tokens cut from the document's end to fit the model's limit (0 when it fit). */
  cut: number;
}

export interface RerankerEngine extends ModelEngine {
  /** Tokens per (query, document) pair: the model's own limit, or the manifest's max_context if smaller. */
  readonly maxTokens: number;
  /**
   * Each document paired with the query through the tokenizer's own (text, text_pair) template, the
   * document cut from its end so the pair fits `maxTokens` (default: the engine's). A query that
   * leaves no room for a document token throws RerankQueryTooLong.
   */
  tokenizePairs(query: string, documents: string[], maxTokens?: number): Promise<RerankPair[]>;
  /** Relevance in [0, 1] per pair, in order (sigmoid of the one logit, or the positive label's softmax); micro-batched. */
  rerank(pairs: TokenizedItem[], signal?: AbortSignal): Promise<number[]>;
}

/** The query alone fills a pair: `queryTokens` with the template's special tokens, of `maxTokens`. */
export class RerankQueryTooLong extends Error {
  constructor(
    readonly queryTokens: number,
    readonly maxTokens: number,
  ) {
    super(`the query takes ${queryTokens} tokens with the pair's special tokens; a pair holds at most ${maxTokens}`);
  }
}

export interface ImageRequest {
  prompt: string;
  width: number;
  height: number;
  seed: number;
  steps: number;
}

export interface ImageEngine extends ModelEngine {
  stats(): EngineStats;
  /** An image worker (503 when every worker is busy); release it whatever happens. */
  acquire(signal?: AbortSignal): Promise<{ release(): void; generate(req: ImageRequest, signal?: AbortSignal): Promise<Uint8Array> }>;
}
