import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { denoiserGraph } from "./denoiser";
import { textEncoderGraph } from "./text-encoder";
import { buildClipVocab, clipTokenizerFiles } from "./tokenizer";
import { vaeDecoderGraph } from "./vae";

// Tiny diffusion sets in the folder layout of a diffusers ONNX export (what optimum writes):
//   model_index.json
//   scheduler/scheduler_config.json
//   tokenizer/{tokenizer.json, tokenizer_config.json, special_tokens_map.json}
//   text_encoder/{config.json, model.onnx}
//   transformer/{config.json, model.onnx}   (flow-matching set)  or  unet/{…} (SD-style set)
//   vae_decoder/{config.json, model.onnx}
// Two presets: a flow-matching "turbo" set (FlowMatchEulerDiscreteScheduler, shift 3, 16 latent
// channels, like Z-Image/FLUX-style turbo models) and an SD-style set (EulerDiscreteScheduler,
// epsilon prediction, 4 latent channels, like SD-Turbo). Random weights: images are noise.

export const DIFFUSION_GENERATOR_VERSION = 1;

export interface DiffusionModelSpec {
  variant: "flow" | "sd";
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
} as const satisfies Record<string, DiffusionModelSpec>;
export type DiffusionPresetName = keyof typeof DIFFUSION_PRESETS;

const json = (v: unknown) => JSON.stringify(v, null, 2) + "\n";

/** Writes the whole set into `dir` (created; existing files are overwritten). */
export function writeDiffusionModel(dir: string, spec: DiffusionModelSpec): void {
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

  for (const [rel, data] of Object.entries(files)) {
    const path = join(dir, rel);
    mkdirSync(join(path, ".."), { recursive: true });
    writeFileSync(path, data);
  }
}
