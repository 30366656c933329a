// Named specs of the random-weight qwen3 chat models, and their exact parameter counts.

export type MatrixType = "f32" | "f16" | "q8_0";

export interface ChatModelSpec {
  /** general.name */
  name: string;
  /** qwen3.context_length (the trained context size node-llama-cpp reports) */
  contextLength: number;
  /** qwen3.embedding_length */
  embedding: number;
  /** qwen3.block_count */
  blocks: number;
  /** qwen3.attention.head_count */
  heads: number;
  /** qwen3.attention.head_count_kv */
  kvHeads: number;
  /** qwen3.attention.key_length and value_length */
  headDim: number;
  /** qwen3.feed_forward_length */
  feedForward: number;
  /** Upper bound of the BPE vocabulary (bytes + merges + special tokens); the corpus may give fewer. */
  vocabSize: number;
  /** Encoding of the 2D weight matrices (embeddings, attention, feed-forward, output). Norms are F32. */
  matrixType: MatrixType;
  /** PRNG seed: same spec + seed gives a byte-identical file. */
  seed: number;
  ropeFreqBase?: number;
  rmsEpsilon?: number;
  /**
   * How far `<|im_end|>`'s logit leans up (the logits' spread is about 2), so a sampled answer
   * ends on its own after some hundred tokens instead of running on to the end of the context: a
   * random model drew the end token about once in a vocabulary's worth (~1400 tokens, with a long
   * tail), and a client that sends no max_tokens (Codex) waited minutes for noise. Through a
   * residual dimension that the token embeddings hold constant and no block writes; only the end
   * token's output row reads it.
   */
  endLean?: number;
}

/** The vocabulary all presets share (the embedded corpus yields ~1400 tokens). */
const VOCAB_SIZE = 2048;

/**
 * The demo chat model's end lean (`endLean`). Measured (30 answers to "say hi", no max_tokens):
 * at temperature 1 (the default), 2-383 tokens, mean 106; greedy, 36-612. Without it, answers ran
 * to thousands of tokens; at 2, half were under 40; at 6, one token.
 */
const END_LEAN = 1.5;

/** Tiny and fast: for unit and API tests. */
const TINY = {
  name: "appliance-qwen3-chat-tiny",
  contextLength: 8192,
  embedding: 64,
  blocks: 2,
  heads: 4,
  kvHeads: 2,
  headDim: 16,
  feedForward: 128,
  vocabSize: VOCAB_SIZE,
  matrixType: "f16" as const,
  seed: 1,
};

export const CHAT_PRESETS = {
  chat: TINY,
  /**
   * The tiny chat model with a trained context that holds a coding agent's prompt (Claude Code's
   * first request: ~23k tokens of prompt and max_tokens 32000): the demo's `demo-chat`. Its KV
   * cache is 256 bytes a token (2 blocks × 2 KV heads × 16 × K and V in F16): 16 MiB for 65,536.
   */
  "long-chat": { ...TINY, name: "appliance-qwen3-long-chat", contextLength: 65536, endLean: END_LEAN },
  /** Same size class with a larger trained context. */
  "small-chat": { ...TINY, name: "appliance-qwen3-small-chat", contextLength: 16384, matrixType: "q8_0", seed: 2 },
  /** About 65M parameters, Q8_0: for throughput benchmarks on small machines. */
  "bench-64m": {
    name: "appliance-qwen3-bench-64m",
    contextLength: 4096,
    embedding: 768,
    blocks: 10,
    heads: 12,
    kvHeads: 4,
    headDim: 64,
    feedForward: 2048,
    vocabSize: VOCAB_SIZE,
    matrixType: "q8_0",
    seed: 64,
  },
  /**
   * About 25M parameters, Q8_0: a decode step of about 1 ms on 2 CPU threads (llama-server's own
   * timing, one stream: 0.93-1.06 ms), standing in for a GPU's step time in the vs-llama-server
   * bench, where a server's own work per step shows. (384 wide and 4 blocks took 0.25 ms.)
   */
  "bench-1ms": {
    name: "appliance-qwen3-bench-1ms",
    contextLength: 4096,
    embedding: 512,
    blocks: 8,
    heads: 8,
    kvHeads: 2,
    headDim: 64,
    feedForward: 1536,
    vocabSize: VOCAB_SIZE,
    matrixType: "q8_0",
    seed: 65,
  },
  /** About 0.5B parameters, Q8_0, shaped like Qwen3-0.6B without its large vocabulary. */
  "bench-0.5b": {
    name: "appliance-qwen3-bench-0.5b",
    contextLength: 32768,
    embedding: 1024,
    blocks: 32,
    heads: 16,
    kvHeads: 8,
    headDim: 128,
    feedForward: 3072,
    vocabSize: VOCAB_SIZE,
    matrixType: "q8_0",
    seed: 500,
  },
} as const satisfies Record<string, ChatModelSpec>;

export type ChatPresetName = keyof typeof CHAT_PRESETS;

export const CHAT_PRESET_NAMES = Object.keys(CHAT_PRESETS) as ChatPresetName[];

export function isChatPresetName(name: string): name is ChatPresetName {
  return Object.hasOwn(CHAT_PRESETS, name);
}

export function getChatPreset(name: string): ChatModelSpec {
  if (!isChatPresetName(name)) throw new Error(`unknown chat model preset "${name}" (known: ${CHAT_PRESET_NAMES.join(", ")})`);
  return CHAT_PRESETS[name];
}

/** Parameter count of a spec given its actual vocabulary size (sum of all tensor element counts). */
export function countParameters(spec: ChatModelSpec, nVocab: number): number {
  const d = spec.embedding;
  const qDim = spec.heads * spec.headDim;
  const kvDim = spec.kvHeads * spec.headDim;
  const perBlock =
    d + // attn_norm
    d * qDim + // attn_q
    2 * d * kvDim + // attn_k, attn_v
    qDim * d + // attn_output
    2 * spec.headDim + // attn_q_norm, attn_k_norm
    d + // ffn_norm
    3 * d * spec.feedForward; // ffn_gate, ffn_up, ffn_down
  return 2 * nVocab * d + spec.blocks * perBlock + d; // token_embd + output + blocks + output_norm
}
