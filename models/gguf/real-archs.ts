// The catalogue's real chat models as sparse GGUF headers (models/gguf/sparse.ts): the real
// architecture's metadata and tensor table — names, shapes and the per-tensor types of the quantised
// file — with no weights. Tests of the memory planner use them to ask "how much does Gemma 3 27B take
// on a 24 GB card" without a 16.5 GB download.
//
// Sources:
// - Dimensions: the models' config.json on Hugging Face (google/gemma-3-27b-it: text_config and
//   vision_config; Qwen/Qwen3-1.7B), as quoted by public code in the search corpus (NVIDIA
//   TensorRT-LLM's Gemma 3 test copies the 27B config; config caches of google/gemma-3-27b; audits of
//   Qwen3-1.7B snapshots printing its config.json).
// - Keys, tensor names and shapes: llama.cpp as node-llama-cpp 3.22.1 ships it
//   (node_modules/node-llama-cpp/llama/gitRelease.bundle): conversion/base.py TextModel
//   .set_gguf_parameters, conversion/gemma.py Gemma3Model / Gemma3VisionModel, src/models/gemma3.cpp
//   and qwen3.cpp load_arch_tensors, src/llama-arch.cpp tensor names, tools/mtmd/clip-impl.h.
// - Per-tensor types: src/llama-quant.cpp llama_tensor_get_type_impl for LLAMA_FTYPE_MOSTLY_Q4_K_M.
// - Checked against the real files' byte counts in models/catalogue/*.json (test/models/sparse-gguf.test.ts).

import { join } from "node:path";
import { GGML, writeSparseGguf, type GgmlTypeId, type SparseGgufFile, type SparseLayout, type SparseTensor } from "./sparse";
import { byteLevelBpeVocab, sentencePieceVocab } from "./real-vocab";
import { GgufValueType, arr, bool, f32, str, u32, type GgufValue } from "./types";

/** llama.cpp's `general.file_type` for Q4_K_M (include/llama.h LLAMA_FTYPE_MOSTLY_Q4_K_M). */
const FTYPE_Q4_K_M = 15;
const FTYPE_F16 = 1;

/** llama-quant.cpp's use_more_bits: the first and last eighth of the layers, and every third between. */
export function useMoreBits(i: number, n: number): boolean {
  const eighth = Math.floor(n / 8);
  return i < eighth || i >= Math.floor((7 * n) / 8) || (i - eighth) % 3 === 2;
}

export type TensorRole = "token_embd" | "output" | "attn_v" | "ffn_down" | "matrix" | "norm";

/**
 * The type llama.cpp's quantizer gives a tensor of a Q4_K_M file (llama_tensor_get_type_impl, the
 * branches a dense non-Falcon model without experts reaches): 1-D tensors stay F32; `output.weight`
 * is Q6_K, and so is `token_embd.weight` when there is no `output.weight` (tied embeddings: it is
 * quantised as the output); attn_v and ffn_down are Q6_K where use_more_bits(i, n) holds, with i the
 * tensor's position among its kind in file order (here: the layer); every other matrix is Q4_K.
 */
export function q4KMType(role: TensorRole, layer: number, layers: number, tiedEmbeddings: boolean): GgmlTypeId {
  switch (role) {
    case "norm":
      return GGML.F32;
    case "output":
      return GGML.Q6_K;
    case "token_embd":
      return tiedEmbeddings ? GGML.Q6_K : GGML.Q4_K;
    case "attn_v":
    case "ffn_down":
      return useMoreBits(layer, layers) ? GGML.Q6_K : GGML.Q4_K;
    case "matrix":
      return GGML.Q4_K;
  }
}

/** What a decoder-only text model's GGUF needs to be written. */
export interface TextArch {
  arch: "gemma3" | "qwen3";
  layers: number;
  embedding: number;
  feedForward: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  vocab: number;
  trainedContext: number;
  /** The file has no output.weight: the output reuses token_embd. */
  tiedEmbeddings: boolean;
}

/**
 * google/gemma-3-27b-it text_config: hidden_size 5376, intermediate_size 21504, num_hidden_layers 62,
 * num_attention_heads 32, num_key_value_heads 16, head_dim 128, max_position_embeddings 131072,
 * sliding_window 1024 (every 6th layer global: sliding_window_pattern 6, which llama.cpp's gemma3
 * loader also defaults to), rope_theta 1e6 with linear scaling factor 8 (global layers), rms_norm_eps
 * 1e-6. Vocabulary: 262,144 tokens, the tokenizer's size — Gemma3Model.modify_tensors cuts
 * embed_tokens (262,208 rows in the checkpoint) to the tokenizer. No lm_head: tied embeddings.
 */
export const GEMMA_3_27B: TextArch & { slidingWindow: number } = {
  arch: "gemma3",
  layers: 62,
  embedding: 5376,
  feedForward: 21504,
  heads: 32,
  kvHeads: 16,
  headDim: 128,
  vocab: 262_144,
  trainedContext: 131_072,
  tiedEmbeddings: true,
  slidingWindow: 1024,
};

/**
 * Qwen/Qwen3-1.7B config.json: hidden_size 2048, intermediate_size 6144, num_hidden_layers 28,
 * num_attention_heads 16, num_key_value_heads 8, head_dim 128, max_position_embeddings 40960,
 * rope_theta 1e6, rms_norm_eps 1e-6, vocab_size 151936 (151,669 real tokens, the rest padding).
 *
 * tie_word_embeddings is true, yet ggml-org's Q4_K_M file must hold a separate output.weight: the
 * checkpoint stores lm_head.weight and the converter copies what it finds (conversion/qwen.py keeps
 * lm_head). The byte count decides it: with tied embeddings the Q4_K_M mix totals 1,101,457,408
 * bytes of tensor data, 14% short of the file's 1,282,439,264; with output.weight (Q6_K) and
 * token_embd (then plain Q4_K) it totals 1,276,487,680, the file less a ~6 MB vocabulary header.
 */
export const QWEN3_1_7B: TextArch = {
  arch: "qwen3",
  layers: 28,
  embedding: 2048,
  feedForward: 6144,
  heads: 16,
  kvHeads: 8,
  headDim: 128,
  vocab: 151_936,
  trainedContext: 40_960,
  tiedEmbeddings: false,
};

/** The tensor table in llama.cpp's load order (load_arch_tensors), typed as a Q4_K_M file has it. */
function textTensors(a: TextArch): SparseTensor[] {
  const n = a.layers;
  const d = a.embedding;
  const q = a.heads * a.headDim;
  const kv = a.kvHeads * a.headDim;
  const t = (name: string, dims: number[], role: TensorRole, layer = 0): SparseTensor => ({
    name,
    dims,
    type: q4KMType(role, layer, n, a.tiedEmbeddings),
  });
  const out: SparseTensor[] = [t("token_embd.weight", [d, a.vocab], "token_embd")];
  for (let i = 0; i < n; i++) {
    const b = `blk.${i}.`;
    out.push(
      t(`${b}attn_norm.weight`, [d], "norm"),
      t(`${b}attn_q.weight`, [d, q], "matrix"),
      t(`${b}attn_k.weight`, [d, kv], "matrix"),
      t(`${b}attn_v.weight`, [d, kv], "attn_v", i),
      t(`${b}attn_output.weight`, [q, d], "matrix"),
    );
    if (a.arch === "gemma3") out.push(t(`${b}post_attention_norm.weight`, [d], "norm"));
    out.push(
      t(`${b}attn_k_norm.weight`, [a.headDim], "norm"),
      t(`${b}attn_q_norm.weight`, [a.headDim], "norm"),
      t(`${b}ffn_norm.weight`, [d], "norm"),
      t(`${b}ffn_gate.weight`, [d, a.feedForward], "matrix"),
      t(`${b}ffn_up.weight`, [d, a.feedForward], "matrix"),
      t(`${b}ffn_down.weight`, [a.feedForward, d], "ffn_down", i),
    );
    if (a.arch === "gemma3") out.push(t(`${b}post_ffw_norm.weight`, [d], "norm"));
  }
  out.push(t("output_norm.weight", [d], "norm"));
  if (!a.tiedEmbeddings) out.push(t("output.weight", [d, a.vocab], "output"));
  return out;
}

/** Keys TextModel.set_gguf_parameters writes for every decoder (conversion/base.py). */
function textKeys(a: TextArch, name: string): Array<readonly [string, GgufValue]> {
  const k = (key: string) => `${a.arch}.${key}`;
  return [
    ["general.architecture", str(a.arch)],
    ["general.type", str("model")],
    ["general.name", str(name)],
    [k("block_count"), u32(a.layers)],
    [k("context_length"), u32(a.trainedContext)],
    [k("embedding_length"), u32(a.embedding)],
    [k("feed_forward_length"), u32(a.feedForward)],
    [k("attention.head_count"), u32(a.heads)],
    [k("attention.head_count_kv"), u32(a.kvHeads)],
    [k("rope.freq_base"), f32(1_000_000)],
    [k("attention.layer_norm_rms_epsilon"), f32(1e-6)],
    [k("attention.key_length"), u32(a.headDim)],
    [k("attention.value_length"), u32(a.headDim)],
  ];
}

/** gemma-3-27b-it-Q4_K_M.gguf: 808 tensors (62 × 13 + 2). */
export function gemma3_27bGguf(): SparseGgufFile {
  const a = GEMMA_3_27B;
  return {
    metadata: [
      ...textKeys(a, "Gemma 3 27b It"),
      // Gemma3Model.set_gguf_parameters: the sliding window (pattern: llama.cpp's default of 6 for
      // gemma3, src/models/gemma3.cpp load_swa_pattern) and the global layers' linear RoPE scaling.
      ["gemma3.attention.sliding_window", u32(a.slidingWindow)],
      ["gemma3.rope.scaling.type", str("linear")],
      ["gemma3.rope.scaling.factor", f32(8)],
      ["general.file_type", u32(FTYPE_Q4_K_M)],
      ["general.quantization_version", u32(2)],
      ...sentencePieceVocab(
        a.vocab,
        { 0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>", 105: "<start_of_turn>", 106: "<end_of_turn>" },
        { bos: 2, eos: 1, unk: 3, pad: 0 },
      ),
    ],
    tensors: textTensors(a),
  };
}

/** Qwen3-1.7B-Q4_K_M.gguf: 311 tensors (28 × 11 + 3). */
export function qwen3_1_7bGguf(): SparseGgufFile {
  const a = QWEN3_1_7B;
  const names = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
    "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
    "<think>", "</think>",
  ];
  // Qwen3's tokenizer_config: ids 151643-151656 are special (control), 151657-151668 are not.
  const specials: Record<number, { text: string; control: boolean }> = {};
  names.forEach((text, i) => (specials[151_643 + i] = { text, control: i < 14 }));
  return {
    metadata: [
      ...textKeys(a, "Qwen3 1.7B"),
      ["general.file_type", u32(FTYPE_Q4_K_M)],
      ["general.quantization_version", u32(2)],
      ...byteLevelBpeVocab(a.vocab, "qwen2", specials, { bos: 151_643, eos: 151_645, pad: 151_643, firstPad: 151_669 }),
    ],
    tensors: textTensors(a),
  };
}

/**
 * google/gemma-3-27b-it vision_config (SigLIP so400m): hidden_size 1152, intermediate_size 4304,
 * num_hidden_layers 27, num_attention_heads 16, image_size 896, patch_size 14; projected to the text
 * model's 5376. mmproj-model-f16.gguf: F16 matrices; Gemma3VisionModel keeps the patch and position
 * embeddings F32, and 1-D tensors (biases, norms) stay F32. 439 tensors: 3 + 27 × 16 + 4.
 */
export const GEMMA_3_VISION = { embedding: 1152, feedForward: 4304, blocks: 27, heads: 16, imageSize: 896, patchSize: 14, projectionDim: 5376 } as const;

export function gemma3ProjectorGguf(): SparseGgufFile {
  const v = GEMMA_3_VISION;
  const d = v.embedding;
  const F32 = GGML.F32;
  const F16 = GGML.F16;
  const tensors: SparseTensor[] = [
    { name: "v.patch_embd.weight", dims: [v.patchSize, v.patchSize, 3, d], type: F32 },
    { name: "v.patch_embd.bias", dims: [d], type: F32 },
    { name: "v.position_embd.weight", dims: [d, (v.imageSize / v.patchSize) ** 2], type: F32 },
  ];
  const linear = (name: string, fanIn: number, fanOut: number): SparseTensor[] => [
    { name: `${name}.weight`, dims: [fanIn, fanOut], type: F16 },
    { name: `${name}.bias`, dims: [fanOut], type: F32 },
  ];
  const norm = (name: string): SparseTensor[] => [
    { name: `${name}.weight`, dims: [d], type: F32 },
    { name: `${name}.bias`, dims: [d], type: F32 },
  ];
  for (let i = 0; i < v.blocks; i++) {
    const b = `v.blk.${i}.`;
    tensors.push(
      ...norm(`${b}ln1`),
      ...linear(`${b}attn_q`, d, d),
      ...linear(`${b}attn_k`, d, d),
      ...linear(`${b}attn_v`, d, d),
      ...linear(`${b}attn_out`, d, d),
      ...norm(`${b}ln2`),
      ...linear(`${b}ffn_up`, d, v.feedForward),
      ...linear(`${b}ffn_down`, v.feedForward, d),
    );
  }
  tensors.push(
    ...norm("v.post_ln"),
    { name: "mm.soft_emb_norm.weight", dims: [d], type: F32 },
    { name: "mm.input_projection.weight", dims: [v.projectionDim, d], type: F16 },
  );
  return {
    metadata: [
      ["general.architecture", str("clip")],
      ["general.type", str("mmproj")],
      ["general.name", str("Gemma 3 27b It")],
      ["general.file_type", u32(FTYPE_F16)],
      ["clip.has_vision_encoder", bool(true)],
      ["clip.projector_type", str("gemma3")],
      ["clip.vision.projection_dim", u32(v.projectionDim)],
      ["clip.vision.image_size", u32(v.imageSize)],
      ["clip.vision.patch_size", u32(v.patchSize)],
      ["clip.vision.embedding_length", u32(d)],
      ["clip.vision.feed_forward_length", u32(v.feedForward)],
      ["clip.vision.block_count", u32(v.blocks)],
      ["clip.vision.attention.head_count", u32(v.heads)],
      ["clip.vision.image_mean", arr(GgufValueType.FLOAT32, [0.5, 0.5, 0.5])],
      ["clip.vision.image_std", arr(GgufValueType.FLOAT32, [0.5, 0.5, 0.5])],
      ["clip.vision.attention.layer_norm_epsilon", f32(1e-6)],
      ["clip.use_gelu", bool(true)],
    ],
    tensors,
  };
}

/** Catalogue id → role → the file's header. Paths and byte counts are the catalogue entry's. */
export const REAL_MODELS: Record<string, Record<string, () => SparseGgufFile>> = {
  "gemma-3-27b-it": { model: gemma3_27bGguf, mmproj: gemma3ProjectorGguf },
  "qwen3-1.7b": { model: qwen3_1_7bGguf },
};

/** Writes a catalogue model's files, sparse, under `dir` at the catalogue's file paths. */
export function writeRealModel(
  id: string,
  dir: string,
  files: Record<string, { path: string }>,
): Record<string, { path: string; layout: SparseLayout }> {
  const roles = REAL_MODELS[id];
  if (!roles) throw new Error(`no real architecture for ${id} (known: ${Object.keys(REAL_MODELS).join(", ")})`);
  const out: Record<string, { path: string; layout: SparseLayout }> = {};
  for (const [role, build] of Object.entries(roles)) {
    const file = files[role];
    if (!file) throw new Error(`${id}: the catalogue has no "${role}" file`);
    const path = join(dir, file.path);
    out[role] = { path, layout: writeSparseGguf(path, build()) };
  }
  return out;
}
