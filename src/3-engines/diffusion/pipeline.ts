import "../onnx-telemetry"; // before ONNX Runtime starts: no telemetry, no mat-debug log
import * as ort from "onnxruntime-node";
import { basename, dirname, join } from "node:path";
import type { ImageRequest } from "../types";
import { readLayout, type PipelineLayout, type PromptEncoding } from "./layout";
import { gaussianNoise } from "./noise";
import { encodePng, toRgb } from "./png";
import type { PromptEmbedding } from "./text-encoder";
import { inputMeta, toFloat32, toTensor, type InputMeta } from "./tensors";
import type { OnnxBackend } from "../onnx-device";

// Text-to-image on an ONNX export (a diffusers-style folder or the Z-Image-Turbo bundle: layout.ts),
// in TypeScript: prompt → text encoder → seeded noise latents [1, C, H/8, W/8] → `steps` denoiser
// runs, each followed by the scheduler's Euler step → latents / scaling_factor + shift_factor → VAE
// decoder → PNG. No classifier-free guidance: one denoiser run per step, as turbo/distilled models
// are sampled. Everything after the seed is deterministic, so the same request gives the same bytes.

export interface PipelineOptions {
  device: OnnxBackend;
  /** ONNX Runtime intra-op threads of each session (inter-op: 1). */
  threads: number;
  /** Told when CUDA was asked for but could not be used. */
  onFallback?: (error: string) => void;
}

export interface PipelineInfo {
  layout: PipelineLayout["layout"];
  denoiser: "unet" | "transformer";
  scheduler: string;
  latentChannels: number;
  scaleFactor: number;
  maxPromptTokens: number;
  device: OnnxBackend;
}

export class GenerationStopped extends Error {
  constructor() {
    super("generation stopped");
    this.name = "GenerationStopped";
  }
}

interface Denoiser {
  session: ort.InferenceSession;
  sample: string;
  output: string;
  meta: Record<string, InputMeta>;
}

export class DiffusionPipeline {
  private last: { prompt: string; embedding: PromptEmbedding } | null = null;

  private constructor(
    private readonly layout: PipelineLayout,
    private readonly encoder: PromptEncoding,
    private readonly denoiser: Denoiser,
    private readonly vae: { session: ort.InferenceSession; meta: InputMeta },
    readonly info: PipelineInfo,
  ) {}

  static async load(dir: string, opts: PipelineOptions): Promise<DiffusionPipeline> {
    const layout = readLayout(dir);
    try {
      return await DiffusionPipeline.open(layout, opts.device, opts.threads);
    } catch (e) {
      if (opts.device !== "cuda") throw e; // WebGPU is only ever asked for by name: no fallback
      opts.onFallback?.((e as Error).message);
      return DiffusionPipeline.open(layout, "cpu", opts.threads);
    }
  }

  private static async open(layout: PipelineLayout, device: OnnxBackend, threads: number) {
    const options: ort.InferenceSession.SessionOptions = {
      executionProviders: [device],
      intraOpNumThreads: threads,
      interOpNumThreads: 1,
      graphOptimizationLevel: "all",
    };
    const encoder = await layout.openEncoder({ device, threads });
    const opened: { release(): Promise<void> }[] = [];
    try {
      const io = layout.denoiser;
      const graph = join(basename(dirname(io.path)), basename(io.path)); // "unet/model.onnx", "onnx/transformer_model_q4f16.onnx"
      const session = await ort.InferenceSession.create(io.path, options);
      opened.push(session);
      const known = [io.sample, "timestep", "encoder_hidden_states", "pooled_projections"];
      const unknown = session.inputNames.filter((n) => !known.includes(n));
      if (unknown.length) throw new Error(`${graph} wants inputs this pipeline does not provide: ${unknown.join(", ")}`);
      const meta: Record<string, InputMeta> = {};
      for (const n of session.inputNames) meta[n] = inputMeta(session, n);
      if (!meta[io.sample] || !meta.timestep || !meta.encoder_hidden_states)
        throw new Error(`${graph} must take ${io.sample}, timestep and encoder_hidden_states (it takes ${session.inputNames.join(", ")})`);
      if (meta[io.sample]!.rank !== 4 && meta[io.sample]!.rank !== 5) throw new Error(`${graph}: ${io.sample} must be [b, C, h, w] or [b, C, 1, h, w]`);
      const output = io.outputs.find((n) => session.outputNames.includes(n)) ?? session.outputNames[0]!;
      const vae = await ort.InferenceSession.create(layout.vaeDecoderPath, options);
      opened.push(vae);
      const info: PipelineInfo = {
        layout: layout.layout,
        denoiser: io.kind,
        scheduler: layout.scheduler,
        latentChannels: layout.vae.latentChannels,
        scaleFactor: layout.vae.scaleFactor,
        maxPromptTokens: encoder.maxTokens,
        device,
      };
      return new DiffusionPipeline(layout, encoder, { session, sample: io.sample, output, meta }, { session: vae, meta: inputMeta(vae, "latent_sample") }, info);
    } catch (e) {
      await Promise.allSettled([encoder.dispose(), ...opened.map((s) => s.release())]);
      throw e;
    }
  }

  /** One PNG for `req`; `shouldStop` is polled before every step and throws GenerationStopped. */
  async generate(req: ImageRequest, shouldStop: () => boolean = () => false): Promise<Uint8Array> {
    const { scaleFactor, latentChannels: C } = this.info;
    if (req.width % scaleFactor || req.height % scaleFactor) throw new Error(`width and height must be multiples of ${scaleFactor}`);
    const [h, w] = [req.height / scaleFactor, req.width / scaleFactor];
    const stop = () => {
      if (shouldStop()) throw new GenerationStopped();
    };
    const embedding = await this.embed(req.prompt);
    const schedule = this.layout.schedule({ steps: req.steps, imageSeqLen: Math.ceil(h / 2) * Math.ceil(w / 2) });
    const latents = gaussianNoise(req.seed, C * h * w);
    if (schedule.initNoiseSigma !== 1) for (let j = 0; j < latents.length; j++) latents[j]! *= schedule.initNoiseSigma;

    const d = this.denoiser;
    const text: Record<string, ort.Tensor> = {
      encoder_hidden_states: toTensor(d.meta.encoder_hidden_states!, embedding.hidden, embedding.hiddenDims),
    };
    if (d.meta.pooled_projections) {
      if (!embedding.pooled) throw new Error("the denoiser wants pooled_projections but the text encoder has no pooled output");
      text.pooled_projections = toTensor(d.meta.pooled_projections, embedding.pooled.data, embedding.pooled.dims);
    }
    const sampleDims = d.meta[d.sample]!.rank === 5 ? [1, C, 1, h, w] : [1, C, h, w];
    for (let i = 0; i < schedule.timesteps.length; i++) {
      stop();
      if (schedule.sigmas[i + 1] === schedule.sigmas[i]) continue; // a step that moves nothing (Z-Image's last)
      const scale = schedule.inputScale(i);
      const input = scale === 1 ? latents : latents.map((v) => v * scale);
      const out = await d.session.run({
        ...text,
        [d.sample]: toTensor(d.meta[d.sample]!, input, sampleDims),
        timestep: toTensor(d.meta.timestep!, new Float32Array([schedule.timesteps[i]!]), d.meta.timestep!.rank === 0 ? [] : [1]),
      });
      const prediction = toFloat32(out[d.output]!);
      if (prediction.length !== latents.length) throw new Error(`the denoiser's ${d.output} has ${prediction.length} values for ${latents.length} latents`);
      schedule.step(i, prediction, latents);
    }
    stop();
    const { scalingFactor, shiftFactor } = this.layout.vae;
    const z = latents.map((v) => v / scalingFactor + shiftFactor);
    const decoded = await this.vae.session.run({ latent_sample: toTensor(this.vae.meta, z, [1, C, h, w]) });
    const image = decoded.sample ?? Object.values(decoded)[0]!;
    return encodePng(toRgb(toFloat32(image), req.width, req.height), req.width, req.height);
  }

  /** The last prompt's embedding is kept: n images of one request encode their prompt once. */
  private async embed(prompt: string): Promise<PromptEmbedding> {
    if (this.last?.prompt !== prompt) this.last = { prompt, embedding: await this.encoder.encode(prompt) };
    return this.last.embedding;
  }

  async dispose(): Promise<void> {
    await Promise.allSettled([this.encoder.dispose(), this.denoiser.session.release(), this.vae.session.release()]);
  }
}
