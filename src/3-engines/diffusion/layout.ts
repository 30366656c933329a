import type { OnnxBackend } from "../onnx-device";
import { readModelFolder } from "./model-folder";
import { createScheduler } from "./scheduler";
import type { Schedule, ScheduleOptions } from "./scheduler-config";
import { PromptEncoder, type PromptEmbedding } from "./text-encoder";
import { isZImageBundle, readZImageBundle } from "./z-image-bundle";
import { zImageSchedule } from "./z-image-schedule";
import { ZImagePromptEncoder } from "./z-image-text-encoder";

// The model layouts the image pipeline reads, reduced to what the pipeline needs: which graph is
// the denoiser and what its sample and output are called, the sampling schedule, how a prompt
// becomes embeddings, and the VAE decoder with its latent scaling.
//   diffusers folder (model_index.json; optimum's ONNX export)       model-folder.ts
//   Z-Image-Turbo bundle (onnx/*_q4f16.onnx, no model_index.json)    z-image-bundle.ts

export interface PromptEncoding {
  readonly maxTokens: number;
  encode(prompt: string): Promise<PromptEmbedding>;
  dispose(): Promise<void>;
}

export interface PipelineLayout {
  layout: "diffusers" | "z-image";
  denoiser: { kind: "unet" | "transformer"; path: string; sample: string; outputs: string[] };
  scheduler: string;
  schedule(opts: ScheduleOptions): Schedule;
  openEncoder(opts: { device: OnnxBackend; threads: number }): Promise<PromptEncoding>;
  vaeDecoderPath: string;
  vae: { latentChannels: number; scalingFactor: number; shiftFactor: number; scaleFactor: number };
}

export function readLayout(dir: string): PipelineLayout {
  if (isZImageBundle(dir)) {
    const b = readZImageBundle(dir);
    return {
      layout: "z-image",
      denoiser: { kind: "transformer", path: b.transformerPath, sample: "hidden_states", outputs: ["sample", "unified_results"] },
      scheduler: "FlowMatchEulerDiscreteScheduler",
      schedule: ({ steps }) => zImageSchedule(steps),
      openEncoder: (o) => ZImagePromptEncoder.load(b.tokenizerDir, b.textEncoderPath, b.maxPromptTokens, o),
      vaeDecoderPath: b.vaeDecoderPath,
      vae: b.vae,
    };
  }
  const folder = readModelFolder(dir);
  const unet = folder.denoiser.kind === "unet";
  return {
    layout: "diffusers",
    denoiser: { kind: folder.denoiser.kind, path: folder.denoiser.path, sample: unet ? "sample" : "hidden_states", outputs: [unet ? "out_sample" : "out_hidden_states"] },
    scheduler: folder.scheduler.className,
    schedule: createScheduler(folder.scheduler.className, folder.scheduler.config),
    openEncoder: (o) => PromptEncoder.load(folder.tokenizerDir, folder.textEncoderDir, o),
    vaeDecoderPath: folder.vaeDecoderPath,
    vae: folder.vae,
  };
}
