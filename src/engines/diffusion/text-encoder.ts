import "../onnx-telemetry"; // before ONNX Runtime starts: no telemetry, no mat-debug log
import * as transformers from "@huggingface/transformers";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { OnnxBackend } from "../onnx-device";

// The prompt → embeddings half of the pipeline, through transformers.js: the export's own
// tokenizer (tokenizer/tokenizer.json), padded to its max length and truncated there as diffusers
// does for CLIP, and the text encoder (text_encoder/model.onnx) as a generic encoder-only model,
// whatever class its config.json names (CLIPTextModel, T5EncoderModel, …): it is fed the inputs
// its graph declares. Files are read locally only (platform notes: allowRemoteModels off,
// local_files_only), on the explicitly chosen device.

export interface PromptEmbedding {
  hidden: Float32Array;
  /** [1, sequence, dim] */
  hiddenDims: number[];
  /** The pooled embedding [1, dim] where the encoder has one (pooler_output or text_embeds). */
  pooled: { data: Float32Array; dims: number[] } | null;
}

export interface TextEncoderOptions {
  device: OnnxBackend;
  threads: number;
}

type Model = { sessions: Record<string, { inputNames: string[] }> } & ((inputs: Record<string, unknown>) => Promise<Record<string, transformers.Tensor>>);

export class PromptEncoder {
  private constructor(
    private readonly tokenizer: transformers.PreTrainedTokenizer,
    private readonly model: Model,
    readonly maxTokens: number,
  ) {}

  static async load(tokenizerDir: string, textEncoderDir: string, opts: TextEncoderOptions): Promise<PromptEncoder> {
    transformers.env.allowRemoteModels = false;
    const local = { local_files_only: true } as const;
    const tokenizer = await transformers.AutoTokenizer.from_pretrained(tokenizerDir, local);
    const config = JSON.parse(readFileSync(join(textEncoderDir, "config.json"), "utf8")) as { max_position_embeddings?: number };
    const model = (await transformers.PreTrainedModel.from_pretrained(textEncoderDir, {
      ...local,
      subfolder: "",
      model_file_name: "model",
      dtype: "fp32",
      device: opts.device,
      session_options: { intraOpNumThreads: opts.threads, interOpNumThreads: 1 },
    })) as unknown as Model;
    const limit = Math.min(tokenizer.model_max_length, config.max_position_embeddings ?? Infinity);
    return new PromptEncoder(tokenizer, model, Number.isFinite(limit) && limit <= 4096 ? limit : 77);
  }

  async encode(prompt: string): Promise<PromptEmbedding> {
    const enc = this.tokenizer(prompt, { padding: "max_length", max_length: this.maxTokens, truncation: true });
    const wanted = this.model.sessions.model?.inputNames ?? ["input_ids"];
    const inputs: Record<string, unknown> = {};
    for (const name of wanted) inputs[name] = (enc as Record<string, unknown>)[name];
    const out = await this.model(inputs);
    const hidden = out.last_hidden_state ?? Object.values(out)[0];
    if (!hidden) throw new Error("the text encoder returned no last_hidden_state");
    const pooled = out.pooler_output ?? out.text_embeds ?? null;
    return {
      hidden: asFloat32(hidden),
      hiddenDims: hidden.dims,
      pooled: pooled ? { data: asFloat32(pooled), dims: pooled.dims } : null,
    };
  }

  async dispose(): Promise<void> {
    await (this.model as unknown as { dispose(): Promise<unknown> }).dispose();
  }
}

function asFloat32(t: transformers.Tensor): Float32Array {
  return t.type === "float32" ? (t.data as Float32Array) : Float32Array.from(t.data as ArrayLike<number>);
}
