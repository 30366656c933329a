import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { onnx } from "onnx-proto";
import { denoiserGraph } from "./denoiser";
import { textEncoderGraph } from "./text-encoder";
import { buildClipVocab, clipSlowTokenizerFiles, clipTokenizerFiles, pythonJson } from "./tokenizer";
import { vaeDecoderGraph } from "./vae";

// Tiny diffusion sets in the folder layout of a diffusers ONNX export (what optimum writes):
//   model_index.json
//   scheduler/scheduler_config.json
//   tokenizer/{tokenizer.json, tokenizer_config.json, special_tokens_map.json}
//   text_encoder/{config.json, model.onnx}
//   transformer/{config.json, model.onnx}   (flow-matching set)  or  unet/{…} (SD-style set)
//   vae_decoder/{config.json, model.onnx}
// Presets: a flow-matching "turbo" set (FlowMatchEulerDiscreteScheduler, shift 3, 16 latent
// channels, like Z-Image/FLUX-style turbo models), an SD-style set (EulerDiscreteScheduler,
// epsilon prediction, 4 latent channels, like SD-Turbo), and the SD-style set in the exact layout of
// onnxruntime/sd-turbo (layout "olive", below). Random weights: images are noise.

export const DIFFUSION_GENERATOR_VERSION = 1;

export interface DiffusionModelSpec {
  variant: "flow" | "sd";
  /**
   * "olive": the files of onnxruntime/sd-turbo (Olive's CUDA export of SD-Turbo, saved by diffusers'
   * OnnxStableDiffusionPipeline), as `appliance models pull sd-turbo` writes them: model_index.json,
   * scheduler/, tokenizer/{vocab.json, merges.txt, tokenizer_config.json, special_tokens_map.json}
   * (no tokenizer.json; padded with "!"), text_encoder/model.onnx, unet/model.onnx,
   * vae_decoder/model.onnx, no config.json beside any graph; fp16 in and out, int32 input_ids.
   */
  layout?: "olive";
  seed: string;
  latentChannels: number;
  textHidden: number;
  maxLength: number;
  merges: number;
  denoiserWidth: number;
  vaeWidths: [number, number, number, number];
}

export const DIFFUSION_PRESETS = {
  "diffusion-turbo": {
    variant: "flow",
    seed: "diffusion-turbo",
    latentChannels: 16,
    textHidden: 32,
    maxLength: 77,
    merges: 300,
    denoiserWidth: 16,
    vaeWidths: [16, 16, 8, 8],
  },
  "diffusion-sd": {
    variant: "sd",
    seed: "diffusion-sd",
    latentChannels: 4,
    textHidden: 32,
    maxLength: 77,
    merges: 300,
    denoiserWidth: 16,
    vaeWidths: [16, 16, 8, 8],
  },
  "diffusion-sd-turbo-ort": {
    variant: "sd",
    layout: "olive",
    seed: "diffusion-sd-turbo-ort",
    latentChannels: 4,
    textHidden: 32,
    maxLength: 77,
    merges: 300,
    denoiserWidth: 16,
    vaeWidths: [16, 16, 8, 8],
  },
} as const satisfies Record<string, DiffusionModelSpec>;
export type DiffusionPresetName = keyof typeof DIFFUSION_PRESETS;

const json = (v: unknown) => JSON.stringify(v, null, 2) + "\n";

/** Writes the whole set into `dir` (created; existing files are overwritten). */
export function writeDiffusionModel(dir: string, spec: DiffusionModelSpec): void {
  const files = spec.layout === "olive" ? oliveSdFiles(spec) : diffusersFiles(spec);
  for (const [rel, data] of Object.entries(files)) {
    const path = join(dir, rel);
    mkdirSync(join(path, ".."), { recursive: true });
    writeFileSync(path, data);
  }
}

function diffusersFiles(spec: DiffusionModelSpec): Record<string, string | Uint8Array> {
  const flow = spec.variant === "flow";
  const denoiser = flow ? "transformer" : "unet";
  const files: Record<string, string | Uint8Array> = {};
  const vocab = buildClipVocab(spec.merges);
  const vocabSize = Object.keys(vocab.vocab).length;

  files["model_index.json"] = json({
    _class_name: flow ? "StableDiffusion3Pipeline" : "StableDiffusionPipeline",
    _diffusers_version: "0.35.1",
    _name_or_path: `appliance/tiny-${spec.seed}`,
    scheduler: ["diffusers", flow ? "FlowMatchEulerDiscreteScheduler" : "EulerDiscreteScheduler"],
    text_encoder: ["transformers", "CLIPTextModel"],
    tokenizer: ["transformers", "CLIPTokenizer"],
    [denoiser]: ["diffusers", flow ? "SD3Transformer2DModel" : "UNet2DConditionModel"],
    vae: ["diffusers", "AutoencoderKL"],
  });
  files["scheduler/scheduler_config.json"] = json(
    flow
      ? { _class_name: "FlowMatchEulerDiscreteScheduler", _diffusers_version: "0.35.1", num_train_timesteps: 1000, shift: 3.0, use_dynamic_shifting: false }
      : {
          _class_name: "EulerDiscreteScheduler",
          _diffusers_version: "0.35.1",
          beta_start: 0.00085,
          beta_end: 0.012,
          beta_schedule: "scaled_linear",
          num_train_timesteps: 1000,
          prediction_type: "epsilon",
          interpolation_type: "linear",
          timestep_spacing: "trailing",
          steps_offset: 1,
          use_karras_sigmas: false,
        },
  );
  for (const [name, text] of Object.entries(clipTokenizerFiles(vocab, spec.maxLength))) files[`tokenizer/${name}`] = text;
  files["text_encoder/config.json"] = json({
    architectures: ["CLIPTextModel"],
    model_type: "clip_text_model",
    hidden_size: spec.textHidden,
    intermediate_size: 4 * spec.textHidden,
    projection_dim: spec.textHidden,
    num_attention_heads: 1,
    num_hidden_layers: 1,
    max_position_embeddings: spec.maxLength,
    vocab_size: vocabSize,
    hidden_act: "quick_gelu",
    layer_norm_eps: 1e-5,
    bos_token_id: vocab.bos,
    eos_token_id: vocab.eos,
    pad_token_id: vocab.eos,
    torch_dtype: "float32",
  });
  files["text_encoder/model.onnx"] = textEncoderGraph({ vocabSize, hidden: spec.textHidden, maxLength: spec.maxLength, seed: spec.seed });
  files[`${denoiser}/config.json`] = json(
    flow
      ? { _class_name: "SD3Transformer2DModel", in_channels: spec.latentChannels, out_channels: spec.latentChannels, sample_size: 128, patch_size: 2, joint_attention_dim: spec.textHidden, pooled_projection_dim: spec.textHidden }
      : { _class_name: "UNet2DConditionModel", in_channels: spec.latentChannels, out_channels: spec.latentChannels, sample_size: 64, cross_attention_dim: spec.textHidden },
  );
  files[`${denoiser}/model.onnx`] = denoiserGraph({ kind: denoiser, channels: spec.latentChannels, hidden: spec.textHidden, width: spec.denoiserWidth, seed: spec.seed });
  files["vae_decoder/config.json"] = json({
    _class_name: "AutoencoderKL",
    in_channels: 3,
    out_channels: 3,
    latent_channels: spec.latentChannels,
    block_out_channels: [...spec.vaeWidths].reverse(),
    scaling_factor: flow ? 0.3611 : 0.18215,
    shift_factor: flow ? 0.1159 : null,
    sample_size: 1024,
  });
  files["vae_decoder/model.onnx"] = vaeDecoderGraph({ channels: spec.latentChannels, widths: spec.vaeWidths, seed: spec.seed });
  return files;
}

// onnxruntime/sd-turbo at 6d0b4c16d1606606694b58681a91b0edf1415268 (models/catalogue/sd-turbo.json):
// model_index.json (595 bytes) and scheduler/scheduler_config.json (548 bytes) are what diffusers
// 0.24's save_config writes for an OnnxStableDiffusionPipeline from stabilityai/sd-turbo; their
// recorded sizes and line counts match these texts exactly. The graphs' I/O follows Olive's SD
// configs (examples/stable_diffusion/config_*.json: input and output names, dynamic axes, float16
// with keep_io_types = false; input_ids int32 as its user_script feeds them). The real graphs are
// ORT-CUDA-fused (NhwcConv, GroupNorm, MultiHeadAttention: CUDA only); these keep plain ops, so the
// set runs on a CPU.
const OLIVE_SCHEDULER_CONFIG = `{
  "_class_name": "EulerDiscreteScheduler",
  "_diffusers_version": "0.24.0",
  "beta_end": 0.012,
  "beta_schedule": "scaled_linear",
  "beta_start": 0.00085,
  "clip_sample": false,
  "interpolation_type": "linear",
  "num_train_timesteps": 1000,
  "prediction_type": "epsilon",
  "sample_max_value": 1.0,
  "set_alpha_to_one": false,
  "sigma_max": null,
  "sigma_min": null,
  "skip_prk_steps": true,
  "steps_offset": 1,
  "timestep_spacing": "trailing",
  "timestep_type": "discrete",
  "trained_betas": null,
  "use_karras_sigmas": false
}
`;

function oliveSdFiles(spec: DiffusionModelSpec): Record<string, string | Uint8Array> {
  const { textHidden: H, latentChannels: C } = spec;
  const vocab = buildClipVocab(spec.merges, "clip");
  const vocabSize = Object.keys(vocab.vocab).length;
  const ort = ["diffusers", "OnnxRuntimeModel"];
  const files: Record<string, string | Uint8Array> = {
    "model_index.json": pythonJson({
      _class_name: "OnnxStableDiffusionPipeline",
      _diffusers_version: "0.24.0",
      feature_extractor: [null, null],
      requires_safety_checker: true,
      safety_checker: [null, null],
      scheduler: ["diffusers", "EulerDiscreteScheduler"],
      text_encoder: ort,
      tokenizer: ["transformers", "CLIPTokenizer"],
      unet: ort,
      vae_decoder: ort,
      vae_encoder: ort,
    }),
    "scheduler/scheduler_config.json": OLIVE_SCHEDULER_CONFIG,
  };
  for (const [name, text] of Object.entries(clipSlowTokenizerFiles(vocab, spec.maxLength))) files[`tokenizer/${name}`] = text;
  const { FLOAT16: f16, INT32: i32 } = onnx.TensorProto.DataType;
  files["text_encoder/model.onnx"] = retypeIo(textEncoderGraph({ vocabSize, hidden: H, maxLength: spec.maxLength, seed: spec.seed }), {
    input_ids: [i32, ["batch", "sequence"]],
    last_hidden_state: [f16, ["batch", "sequence", H]],
    pooler_output: [f16, ["batch", H]],
  });
  const sample = ["unet_sample_batch", "unet_sample_channels", "unet_sample_height", "unet_sample_width"];
  files["unet/model.onnx"] = retypeIo(denoiserGraph({ kind: "unet", io: "float16", channels: C, hidden: H, width: spec.denoiserWidth, seed: spec.seed }), {
    sample: [f16, sample],
    timestep: [f16, ["unet_time_batch"]],
    encoder_hidden_states: [f16, ["unet_hidden_batch", "unet_hidden_sequence", H]],
    out_sample: [f16, sample],
  });
  files["vae_decoder/model.onnx"] = retypeIo(vaeDecoderGraph({ channels: C, widths: spec.vaeWidths, seed: spec.seed }), {
    latent_sample: [f16, ["batch", "channels", "height", "width"]],
    sample: [f16, ["batch", 3, "sample_height", "sample_width"]],
  });
  return files;
}

/**
 * `model` with some graph inputs and outputs declared with another element type and dims, converted
 * at the boundary by Cast nodes (to the old type after an input, to the new one before an output):
 * the I/O of an fp16 conversion with keep_io_types = false, while the math stays as it was.
 */
function retypeIo(model: Uint8Array, io: Record<string, [elem: number, dims: (number | string)[]]>): Uint8Array {
  const m = onnx.ModelProto.decode(model);
  const g = m.graph!;
  const [inputs, outputs, nodes] = [g.input ?? [], g.output ?? [], g.node ?? []];
  const head: onnx.INodeProto[] = [];
  const tail: onnx.INodeProto[] = [];
  for (const [name, [elem, dims]] of Object.entries(io)) {
    const input = inputs.find((v) => v.name === name);
    const info = input ?? outputs.find((v) => v.name === name);
    if (!info) throw new Error(`${g.name}: no input or output ${name}`);
    const was = info.type!.tensorType!.elemType!;
    info.type = { tensorType: { elemType: elem, shape: { dim: dims.map((d) => (typeof d === "number" ? { dimValue: d } : { dimParam: d })) } } };
    if (was === elem) continue;
    const inner = `${name}.${input ? "cast" : "uncast"}`;
    for (const n of nodes) {
      n.input = (n.input ?? []).map((x) => (x === name ? inner : x));
      n.output = (n.output ?? []).map((x) => (x === name ? inner : x));
    }
    const to = { name: "to", type: onnx.AttributeProto.AttributeType.INT, i: input ? was : elem };
    (input ? head : tail).push({ opType: "Cast", name: `${inner}_node`, input: [input ? name : inner], output: [input ? inner : name], attribute: [to] });
  }
  g.node = [...head, ...nodes, ...tail];
  return onnx.ModelProto.encode(m).finish();
}
