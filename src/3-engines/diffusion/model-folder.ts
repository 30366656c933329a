import { existsSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import type { SchedulerConfig } from "./scheduler-config";

// A diffusers-style ONNX export folder (what `optimum-cli export onnx` writes for a diffusion
// pipeline, and what diffusers' OnnxStableDiffusionPipeline saves for Olive, e.g. onnxruntime/sd-turbo),
// read once at load:
//   model_index.json                      names the scheduler class (and the components)
//   scheduler/scheduler_config.json       the scheduler's settings
//   tokenizer/tokenizer.json, or CLIP's slow-tokenizer files vocab.json + merges.txt
//                                         (+ tokenizer_config.json, special_tokens_map.json)
//   text_encoder/model.onnx (+ config.json) input_ids [b, s] → last_hidden_state [b, s, d] (+ pooler_output)
//   transformer/model.onnx  (flow)        hidden_states [b, c, h/8, w/8], timestep,
//                                         encoder_hidden_states (+ pooled_projections)
//                                         → out_hidden_states (the velocity)   (optimum's SD3 names)
//   or unet/model.onnx      (SD-style)    sample, timestep, encoder_hidden_states → out_sample
//   vae_decoder/config.json + model.onnx  latent_sample [b, c, h/8, w/8] → sample [b, 3, h, w]
// `timestep` is diffusers' scheduler timestep (flow: σ·num_train_timesteps, 1000 → 0; Euler: the
// training timestep, 999 → 0), in whatever element type and rank (scalar or [1]) the graph declares;
// a model that wants another convention (FLUX t/1000, Z-Image (1000 − t)/1000) converts in-graph.
// The VAE's config gives latent_channels, scaling_factor, shift_factor and, from the number of
// block_out_channels, the scale factor between latents and pixels (8 for every current VAE). An
// export with no VAE config (Olive's) gets Stable Diffusion's: 4 channels, 0.18215, no shift, 8 —
// what OnnxStableDiffusionPipeline hard-codes.
// SDXL folders (text_encoder_2/, tokenizer_2/: two text encoders, and a UNet that also takes the
// pooled text_embeds and time_ids) are refused by name: this pipeline feeds one text encoder.

export interface ModelFolder {
  root: string;
  scheduler: { className: string; config: SchedulerConfig };
  tokenizerDir: string;
  /** Which files the tokenizer is read from. */
  tokenizerFiles: "tokenizer.json" | "vocab.json+merges.txt";
  textEncoderDir: string;
  denoiser: { kind: "unet" | "transformer"; path: string };
  vaeDecoderPath: string;
  vae: { latentChannels: number; scalingFactor: number; shiftFactor: number; scaleFactor: number };
}

export function readModelFolder(root: string): ModelFolder {
  if (!existsSync(root) || !statSync(root).isDirectory()) throw new Error(`${root}: not a folder (an image model is a diffusers-style ONNX export folder)`);
  const index = readJson(root, "model_index.json");
  const xl = ["text_encoder_2", "tokenizer_2"].filter((d) => existsSync(join(root, d)));
  if (xl.length || /XL/.test(String(index._class_name ?? "")))
    throw new Error(
      `${root}: an SDXL pipeline (${xl.length ? xl.map((d) => `${d}/`).join(", ") : String(index._class_name)}) is not supported: it needs a second text encoder (text_encoder_2, tokenizer_2) whose hidden states are concatenated with the first's, and a UNet fed its pooled text_embeds and time_ids; this image engine runs one text encoder (SD 1.x/2.x, SD-Turbo, SD3-style transformers)`,
    );
  const schedulerConfig = readJson(root, "scheduler/scheduler_config.json") as SchedulerConfig;
  const named = Array.isArray(index.scheduler) ? index.scheduler[1] : undefined;
  const className = typeof named === "string" ? named : schedulerConfig._class_name;
  if (typeof className !== "string") throw new Error(`${root}: model_index.json names no scheduler class`);

  const tokenizerFiles = existsSync(join(root, "tokenizer/tokenizer.json")) ? "tokenizer.json" : "vocab.json+merges.txt";
  if (tokenizerFiles !== "tokenizer.json" && !(existsSync(join(root, "tokenizer/vocab.json")) && existsSync(join(root, "tokenizer/merges.txt"))))
    throw new Error(`${root}: tokenizer/tokenizer.json is missing (nor are CLIP's tokenizer/vocab.json and tokenizer/merges.txt there)`);
  for (const f of ["text_encoder/model.onnx", "vae_decoder/model.onnx"]) need(root, f);
  const kind = existsSync(join(root, "transformer/model.onnx")) ? "transformer" : existsSync(join(root, "unet/model.onnx")) ? "unet" : null;
  if (!kind) throw new Error(`${root}: neither transformer/model.onnx nor unet/model.onnx is there`);

  const vaeConfig = ["vae_decoder/config.json", "vae/config.json"].find((f) => existsSync(join(root, f)));
  const vae = vaeConfig ? readJson(root, vaeConfig) : {};
  const blocks = Array.isArray(vae.block_out_channels) ? vae.block_out_channels.length : 4;
  return {
    root,
    scheduler: { className, config: schedulerConfig },
    tokenizerDir: join(root, "tokenizer"),
    tokenizerFiles,
    textEncoderDir: join(root, "text_encoder"),
    denoiser: { kind, path: join(root, kind, "model.onnx") },
    vaeDecoderPath: join(root, "vae_decoder/model.onnx"),
    vae: {
      latentChannels: positiveInt(vae.latent_channels ?? 4, "latent_channels"),
      scalingFactor: finite(vae.scaling_factor ?? 0.18215, "scaling_factor"),
      shiftFactor: finite(vae.shift_factor ?? 0, "shift_factor"),
      scaleFactor: 2 ** (blocks - 1),
    },
  };
}

function need(root: string, rel: string): void {
  if (!existsSync(join(root, rel))) throw new Error(`${root}: ${rel} is missing`);
}

function readJson(root: string, rel: string): Record<string, unknown> {
  need(root, rel);
  try {
    return JSON.parse(readFileSync(join(root, rel), "utf8"));
  } catch (e) {
    throw new Error(`${root}: ${rel}: ${(e as Error).message}`);
  }
}

function finite(v: unknown, field: string): number {
  if (typeof v !== "number" || !Number.isFinite(v)) throw new Error(`vae config: ${field} must be a number`);
  return v;
}

function positiveInt(v: unknown, field: string): number {
  if (!Number.isInteger(v) || (v as number) < 1) throw new Error(`vae config: ${field} must be a positive integer`);
  return v as number;
}
