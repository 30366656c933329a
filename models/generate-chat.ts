// Random-weight qwen3 chat models as GGUF: llama.cpp's qwen3 tensor names and shapes, the BPE
// tokenizer with ChatML/tool/think special tokens, and the Qwen3-style chat template.

import { QWEN3_CHAT_TEMPLATE } from "./chat-template";
import { buildBpeVocab, type BpeVocab } from "./gguf/bpe";
import { FILE_TYPE_FOR, GgmlType, GgufValueType, arr, bool, f32, str, u32, type GgufValue } from "./gguf/types";
import { writeGguf, type GgufTensor } from "./gguf/writer";
import { countParameters, type ChatModelSpec, type MatrixType } from "./presets";
import { editedSource, normalishSource } from "./random";

export type { ChatModelSpec } from "./presets";

/** Bump when the bytes a spec produces change (format, tokenizer, template, weight init). */
export const GENERATOR_VERSION = "qwen3-gen-1";

export interface ChatModelInfo {
  path: string;
  bytes: number;
  parameters: number;
  vocabSize: number;
}

const GGML_TYPE_OF: Record<MatrixType, GgmlType> = {
  f32: GgmlType.F32,
  f16: GgmlType.F16,
  q8_0: GgmlType.Q8_0,
};

/**
 * Weight scales. RMS norms make the model invariant to the overall scale of the residual stream, so
 * what matters is the balance between the token embedding and what the blocks add to it. Projections
 * that read a normalised stream get std 1/sqrt(fan_in) (unit-scale outputs); projections that write
 * to the residual get EMBEDDING_STD/sqrt(fan_in * 2 * blocks), so the blocks together add about as
 * much as the embedding: outputs depend on the current token and on context, and greedy decoding
 * wanders instead of locking onto one token (which deep random models otherwise do).
 */
const EMBEDDING_STD = 0.02;
/** Norm weights are drawn around 1.0 with this spread. */
const NORM_STD = 0.02;
/** Output weights scaled so logits have a std of about this (after the final RMS norm). */
const LOGIT_STD = 2;

export function vocabFor(spec: ChatModelSpec): BpeVocab {
  return buildBpeVocab({ vocabSize: spec.vocabSize, minPairCount: 1 });
}

function validate(spec: ChatModelSpec): void {
  const positive = ["contextLength", "embedding", "blocks", "heads", "kvHeads", "headDim", "feedForward"] as const;
  for (const key of positive)
    if (!Number.isInteger(spec[key]) || spec[key] <= 0) throw new Error(`spec.${key} must be a positive integer`);
  if (spec.heads % spec.kvHeads !== 0) throw new Error("spec.heads must be a multiple of spec.kvHeads");
  if (spec.headDim % 2 !== 0) throw new Error("spec.headDim must be even (rope)");
  if (spec.matrixType === "q8_0") {
    for (const key of ["embedding", "feedForward"] as const)
      if (spec[key] % 32 !== 0) throw new Error(`spec.${key} must be a multiple of 32 for q8_0`);
    if ((spec.heads * spec.headDim) % 32 !== 0) throw new Error("heads * headDim must be a multiple of 32 for q8_0");
  }
}

function metadataFor(spec: ChatModelSpec, vocab: BpeVocab): Array<[string, GgufValue]> {
  const a = "qwen3";
  return [
    ["general.architecture", str(a)],
    ["general.name", str(spec.name)],
    ["general.file_type", u32(FILE_TYPE_FOR[GGML_TYPE_OF[spec.matrixType]])],
    [`${a}.context_length`, u32(spec.contextLength)],
    [`${a}.embedding_length`, u32(spec.embedding)],
    [`${a}.block_count`, u32(spec.blocks)],
    [`${a}.feed_forward_length`, u32(spec.feedForward)],
    [`${a}.attention.head_count`, u32(spec.heads)],
    [`${a}.attention.head_count_kv`, u32(spec.kvHeads)],
    [`${a}.attention.key_length`, u32(spec.headDim)],
    [`${a}.attention.value_length`, u32(spec.headDim)],
    [`${a}.rope.freq_base`, f32(spec.ropeFreqBase ?? 1_000_000)],
    [`${a}.attention.layer_norm_rms_epsilon`, f32(spec.rmsEpsilon ?? 1e-6)],
    ["tokenizer.ggml.model", str("gpt2")],
    ["tokenizer.ggml.pre", str("qwen2")],
    ["tokenizer.ggml.tokens", arr(GgufValueType.STRING, vocab.tokens)],
    ["tokenizer.ggml.token_type", arr(GgufValueType.INT32, vocab.tokenTypes)],
    ["tokenizer.ggml.merges", arr(GgufValueType.STRING, vocab.merges)],
    ["tokenizer.ggml.eos_token_id", u32(vocab.special["<|im_end|>"])],
    ["tokenizer.ggml.padding_token_id", u32(vocab.special["<|endoftext|>"])],
    ["tokenizer.ggml.bos_token_id", u32(vocab.special["<|endoftext|>"])],
    ["tokenizer.ggml.add_bos_token", bool(false)],
    ["tokenizer.chat_template", str(QWEN3_CHAT_TEMPLATE)],
  ];
}

function tensorsFor(spec: ChatModelSpec, vocab: BpeVocab): GgufTensor[] {
  const nVocab = vocab.tokens.length;
  const d = spec.embedding;
  const qDim = spec.heads * spec.headDim;
  const kvDim = spec.kvHeads * spec.headDim;
  const matrix = GGML_TYPE_OF[spec.matrixType];
  const count = (dims: number[]) => dims.reduce((x, y) => x * y, 1);
  const weight = (name: string, dims: number[], std: number): GgufTensor => ({
    name,
    dims,
    type: matrix,
    data: normalishSource(`${spec.seed}:${name}`, count(dims), std),
  });
  const reading = (fanIn: number) => 1 / Math.sqrt(fanIn);
  const writing = (fanIn: number) => EMBEDDING_STD / Math.sqrt(fanIn * 2 * spec.blocks);
  const norm = (name: string, size: number): GgufTensor => ({
    name,
    dims: [size],
    type: GgmlType.F32,
    data: normalishSource(`${spec.seed}:${name}`, size, NORM_STD, 1),
  });

  const tensors: GgufTensor[] = [weight("token_embd.weight", [d, nVocab], EMBEDDING_STD)];
  for (let i = 0; i < spec.blocks; i++) {
    const p = `blk.${i}.`;
    tensors.push(
      norm(`${p}attn_norm.weight`, d),
      weight(`${p}attn_q.weight`, [d, qDim], reading(d)),
      weight(`${p}attn_k.weight`, [d, kvDim], reading(d)),
      weight(`${p}attn_v.weight`, [d, kvDim], reading(d)),
      weight(`${p}attn_output.weight`, [qDim, d], writing(qDim)),
      norm(`${p}attn_q_norm.weight`, spec.headDim),
      norm(`${p}attn_k_norm.weight`, spec.headDim),
      norm(`${p}ffn_norm.weight`, d),
      weight(`${p}ffn_gate.weight`, [d, spec.feedForward], reading(d)),
      weight(`${p}ffn_up.weight`, [d, spec.feedForward], reading(d)),
      weight(`${p}ffn_down.weight`, [spec.feedForward, d], writing(spec.feedForward)),
    );
  }
  // A separate (untied) output matrix: with tied embeddings a random model keeps repeating its input.
  tensors.push(norm("output_norm.weight", d), weight("output.weight", [d, nVocab], LOGIT_STD / Math.sqrt(d)));
  if (spec.endLean) leanToEnd(tensors, spec, vocab.special["<|im_end|>"]!, spec.endLean);
  return tensors;
}

/**
 * `endLean`: residual dimension 0 holds END_DIM in every token's embedding and no block writes it
 * (row 0 of each residual-writing projection is zero), so after the final norm it reads about
 * END_DIM / (the stream's RMS) at every position; the output row of the end token alone reads it.
 */
function leanToEnd(tensors: GgufTensor[], spec: ChatModelSpec, end: number, lean: number): void {
  const d = spec.embedding;
  // the rest of the stream: the embedding's spread, and about as much again from the blocks
  const END_DIM = EMBEDDING_STD;
  const normalised = END_DIM / Math.sqrt((END_DIM * END_DIM + (d - 1) * 2 * EMBEDDING_STD * EMBEDDING_STD) / d);
  const edit = (name: string, fn: (index: number, value: number) => number) => {
    const t = tensors.find((x) => x.name === name)!;
    t.data = editedSource(t.data, fn);
  };
  edit("token_embd.weight", (i, v) => (i % d === 0 ? END_DIM : v));
  for (let b = 0; b < spec.blocks; b++) {
    // [fan_in, d]: output dimension 0 is the first fan_in values
    edit(`blk.${b}.attn_output.weight`, (i, v) => (i < spec.heads * spec.headDim ? 0 : v));
    edit(`blk.${b}.ffn_down.weight`, (i, v) => (i < spec.feedForward ? 0 : v));
  }
  edit("output.weight", (i, v) => (i % d === 0 ? (i / d === end ? lean / normalised : 0) : v));
}

/** Writes a random-weight qwen3 chat model for `spec` to `path` (overwriting it). */
export async function writeChatModel(path: string, spec: ChatModelSpec): Promise<ChatModelInfo> {
  validate(spec);
  const vocab = vocabFor(spec);
  const nVocab = vocab.tokens.length;
  const { bytes, parameters } = await writeGguf(path, {
    metadata: metadataFor(spec, vocab),
    tensors: tensorsFor(spec, vocab),
  });
  if (parameters !== countParameters(spec, nVocab)) throw new Error("internal error: parameter count mismatch");
  return { path, bytes, parameters, vocabSize: nVocab };
}
