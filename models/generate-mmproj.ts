// Random-weight Gemma 3 multimodal projectors ("mmproj") as GGUF: a SigLIP vision tower plus the
// Gemma 3 projector (avg-pool, RMS norm, linear), with the key names, tensor names, shapes and types
// that llama.cpp's convert_hf_to_gguf.py (Gemma3VisionModel) writes and tools/mtmd/clip.cpp reads
// (clip_model_loader::load_hparams / load_tensors, clip_graph_siglip::build).

import { CHAT_PRESETS } from "./presets";
import { FILE_TYPE_FOR, GgmlType, GgufValueType, arr, bool, f32, str, u32, type GgufValue } from "./gguf/types";
import { writeGguf, type GgufTensor } from "./gguf/writer";
import { normalishSource } from "./random";

/** Bump when the bytes a spec produces change (keys, tensors, weight init). */
export const PROJECTOR_GENERATOR_VERSION = "gemma3-mmproj-gen-1";

export interface ProjectorSpec {
  /** general.name */
  name: string;
  /** clip.vision.image_size: every image is resized to imageSize x imageSize before encoding. */
  imageSize: number;
  /** clip.vision.patch_size */
  patchSize: number;
  /**
   * clip.vision.projector.scale_factor (clip.cpp's hparams.n_merge): the side of the average-pool
   * window that merges patches into image tokens. clip.cpp defaults to 4 for gemma3 when absent.
   */
  mergeFactor: number;
  /** clip.vision.embedding_length (vision hidden size) */
  embedding: number;
  /** clip.vision.block_count */
  blocks: number;
  /** clip.vision.attention.head_count */
  heads: number;
  /** clip.vision.feed_forward_length */
  feedForward: number;
  /** clip.vision.projection_dim: must equal the text model's n_embd (mtmd checks it). */
  projectionDim: number;
  /**
   * Encoding of the 2D matrices (attention, feed-forward, mm.input_projection). Not q8_0: clip.cpp
   * transposes mm.input_projection with ggml_cont, which quantized types do not support (the real
   * converter forces it to F16, llama.cpp issue 13025).
   */
  matrixType: "f32" | "f16";
  /** PRNG seed: same spec + seed gives a byte-identical file. */
  seed: number;
  /** clip.vision.attention.layer_norm_epsilon (SigLIP and the Gemma 3 converter use 1e-6). */
  layerNormEpsilon?: number;
}

export const PROJECTOR_PRESETS = {
  /** Tiny vision projector for the "chat" text model: 64x64 images, 8x8 patches, 16 tokens per image. */
  "chat-vision": {
    name: "appliance-gemma3-mmproj-tiny",
    imageSize: 64,
    patchSize: 8,
    mergeFactor: 2,
    embedding: 32,
    blocks: 2,
    heads: 4,
    feedForward: 64,
    projectionDim: CHAT_PRESETS.chat.embedding,
    matrixType: "f16",
    seed: 1,
  },
} satisfies Record<string, ProjectorSpec>;

export type ProjectorPresetName = keyof typeof PROJECTOR_PRESETS;

export function getProjectorPreset(name: string): ProjectorSpec {
  const spec = (PROJECTOR_PRESETS as Record<string, ProjectorSpec>)[name];
  if (!spec) throw new Error(`unknown projector preset "${name}" (known: ${Object.keys(PROJECTOR_PRESETS).join(", ")})`);
  return spec;
}

export interface ProjectorInfo {
  path: string;
  bytes: number;
  /** Tokens (embeddings) one image becomes: ((imageSize / patchSize) / mergeFactor)^2. */
  imageTokens: number;
}

/** clip_n_output_tokens for PROJECTOR_TYPE_GEMMA3: n_patches / (n_merge * n_merge). */
export function projectorImageTokens(spec: ProjectorSpec): number {
  const side = spec.imageSize / spec.patchSize / spec.mergeFactor;
  return side * side;
}

/** Gemma 3 / SigLIP preprocessing (preprocessor_config.json): pixels map to [-1, 1]. */
const IMAGE_MEAN = [0.5, 0.5, 0.5];
const IMAGE_STD = [0.5, 0.5, 0.5];
/** Norm weights are drawn around 1.0, biases around 0, with this spread. */
const NORM_STD = 0.02;
const BIAS_STD = 0.02;
/** Learned position embeddings: small next to the unit-scale patch embeddings, but enough to tell patches apart. */
const POSITION_STD = 0.1;
/**
 * Image embeddings are fed to the text model in place of token embeddings, so they get the scale of
 * the chat generator's token embeddings (EMBEDDING_STD in generate-chat.ts).
 */
const OUTPUT_STD = 0.02;

function validate(spec: ProjectorSpec): void {
  const positive = ["imageSize", "patchSize", "mergeFactor", "embedding", "blocks", "heads", "feedForward", "projectionDim"] as const;
  for (const key of positive)
    if (!Number.isInteger(spec[key]) || spec[key] <= 0) throw new Error(`spec.${key} must be a positive integer`);
  if (spec.imageSize % spec.patchSize !== 0) throw new Error("spec.imageSize must be a multiple of spec.patchSize");
  // clip_graph_siglip::build pools the patch grid with a mergeFactor x mergeFactor window and stride.
  if ((spec.imageSize / spec.patchSize) % spec.mergeFactor !== 0)
    throw new Error("spec.imageSize / spec.patchSize must be a multiple of spec.mergeFactor");
  if (spec.embedding % spec.heads !== 0) throw new Error("spec.embedding must be a multiple of spec.heads");
  // load_tensors swaps ffn_up/ffn_down for gemma3 when ffn_down's ne[0] == n_embd (the is_ffn_swapped
  // fix for old exports); with feedForward == embedding that test cannot tell the two apart.
  if (spec.feedForward === spec.embedding) throw new Error("spec.feedForward must differ from spec.embedding");
}

function metadataFor(spec: ProjectorSpec): Array<[string, GgufValue]> {
  // Same keys as MmprojModel.set_gguf_parameters + Gemma3VisionModel.set_gguf_parameters. Required by
  // load_hparams: embedding_length, attention.head_count, feed_forward_length, block_count,
  // projection_dim, attention.layer_norm_epsilon, image_size, patch_size (get_u32/get_f32 with
  // required=true; the u32 getters abort on any other value type), and image_mean/image_std with at
  // least 3 floats. Without clip.use_gelu the FFN would use gelu_quick.
  const matrix = spec.matrixType === "f16" ? GgmlType.F16 : GgmlType.F32;
  return [
    ["general.architecture", str("clip")],
    ["general.type", str("mmproj")],
    ["general.name", str(spec.name)],
    ["general.file_type", u32(FILE_TYPE_FOR[matrix])],
    ["clip.has_vision_encoder", bool(true)],
    ["clip.projector_type", str("gemma3")],
    ["clip.vision.projection_dim", u32(spec.projectionDim)],
    ["clip.vision.image_size", u32(spec.imageSize)],
    ["clip.vision.patch_size", u32(spec.patchSize)],
    ["clip.vision.embedding_length", u32(spec.embedding)],
    ["clip.vision.feed_forward_length", u32(spec.feedForward)],
    ["clip.vision.block_count", u32(spec.blocks)],
    ["clip.vision.attention.head_count", u32(spec.heads)],
    ["clip.vision.image_mean", arr(GgufValueType.FLOAT32, IMAGE_MEAN)],
    ["clip.vision.image_std", arr(GgufValueType.FLOAT32, IMAGE_STD)],
    ["clip.vision.attention.layer_norm_epsilon", f32(spec.layerNormEpsilon ?? 1e-6)],
    ["clip.use_gelu", bool(true)],
    // The converter writes this only when it is not 4 (tinygemma3); always writing it is equivalent.
    ["clip.vision.projector.scale_factor", u32(spec.mergeFactor)],
  ];
}

function tensorsFor(spec: ProjectorSpec): GgufTensor[] {
  const d = spec.embedding;
  const ff = spec.feedForward;
  const p = spec.patchSize;
  const nPatches = (spec.imageSize / p) ** 2;
  const matrix = spec.matrixType === "f16" ? GgmlType.F16 : GgmlType.F32;
  const count = (dims: number[]) => dims.reduce((x, y) => x * y, 1);
  const tensor = (name: string, dims: number[], type: GgmlType, std: number, mean = 0): GgufTensor => ({
    name,
    dims,
    type,
    data: normalishSource(`${spec.seed}:${name}`, count(dims), std, mean),
  });
  // Linear layers: GGUF ne = [in, out] (torch weight [out, in] reversed), used as ggml_mul_mat(w, x).
  const linear = (name: string, fanIn: number, fanOut: number, std: number) => [
    tensor(`${name}.weight`, [fanIn, fanOut], matrix, std),
    tensor(`${name}.bias`, [fanOut], GgmlType.F32, BIAS_STD),
  ];
  const layerNorm = (name: string, size: number) => [
    tensor(`${name}.weight`, [size], GgmlType.F32, NORM_STD, 1),
    tensor(`${name}.bias`, [size], GgmlType.F32, BIAS_STD),
  ];
  // Pre-LN blocks: projections reading a normalised stream get 1/sqrt(fan_in); those writing to
  // the residual are scaled down by sqrt(2 * blocks) so the stream stays near unit scale.
  const reading = (fanIn: number) => 1 / Math.sqrt(fanIn);
  const writing = (fanIn: number) => 1 / Math.sqrt(fanIn * 2 * spec.blocks);

  const tensors: GgufTensor[] = [
    // Conv2d kernel, ne = [kw, kh, in_channels, out_channels] (clip_graph::build_inp, ggml_conv_2d).
    // Gemma3VisionModel.tensor_force_quant keeps ".embeddings." tensors (patch and position) in F32.
    tensor("v.patch_embd.weight", [p, p, 3, d], GgmlType.F32, reading(3 * p * p)),
    tensor("v.patch_embd.bias", [d], GgmlType.F32, BIAS_STD),
    // ne = [n_embd, n_patches], added to the [n_embd, n_patches] patch embeddings in build_vit.
    tensor("v.position_embd.weight", [d, nPatches], GgmlType.F32, POSITION_STD),
  ];
  for (let i = 0; i < spec.blocks; i++) {
    const b = `v.blk.${i}.`;
    tensors.push(
      ...layerNorm(`${b}ln1`, d),
      ...linear(`${b}attn_q`, d, d, reading(d)),
      ...linear(`${b}attn_k`, d, d, reading(d)),
      ...linear(`${b}attn_v`, d, d, reading(d)),
      ...linear(`${b}attn_out`, d, d, writing(d)),
      ...layerNorm(`${b}ln2`, d),
      // SigLIP fc1 -> ffn_up (ne [d, ff]) and fc2 -> ffn_down (ne [ff, d]), the current mapping.
      ...linear(`${b}ffn_up`, d, ff, reading(d)),
      ...linear(`${b}ffn_down`, ff, d, writing(ff)),
    );
  }
  tensors.push(
    ...layerNorm("v.post_ln", d),
    // Gemma3RMSNorm weight as stored by the converter (HF value + 1), so around 1.
    tensor("mm.soft_emb_norm.weight", [d], GgmlType.F32, NORM_STD, 1),
    // HF mm_input_projection_weight is [vision, text] and used as x @ W, so GGUF ne = [text, vision];
    // clip_graph_siglip::build multiplies by its transpose and clip_n_mmproj_embd reads ne[0].
    tensor("mm.input_projection.weight", [spec.projectionDim, d], matrix, OUTPUT_STD / Math.sqrt(d)),
  );
  return tensors;
}

/** Writes a random-weight Gemma 3 mmproj for `spec` to `path` (overwriting it). */
export async function writeProjector(path: string, spec: ProjectorSpec): Promise<ProjectorInfo> {
  validate(spec);
  const { bytes } = await writeGguf(path, { metadata: metadataFor(spec), tensors: tensorsFor(spec) });
  return { path, bytes, imageTokens: projectorImageTokens(spec) };
}
