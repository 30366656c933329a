import "../onnx-telemetry"; // before ONNX Runtime starts: no telemetry, no mat-debug log
import * as transformers from "@huggingface/transformers";
import * as ort from "onnxruntime-node";
import type { OnnxBackend } from "../onnx-device";
import { inputMeta, toFloat32, toTensor } from "./tensors";
import type { PromptEmbedding } from "./text-encoder";

// Z-Image-Turbo's prompt encoder: the prompt as one user turn of Qwen3's chat template with the
// generation prompt (what diffusers' ZImagePipeline and the webnn demo render), tokenised without
// padding and cut at 512 tokens (diffusers' max_sequence_length), then Qwen3's hidden states from
// the bundle's text encoder graph (input_ids, attention_mask → encoder_hidden_states), run as an
// ONNX Runtime session on the chosen device. Files are read locally only.

export function zImagePromptText(prompt: string): string {
  return `<|im_start|>user\n${prompt}<|im_end|>\n<|im_start|>assistant\n`;
}

export class ZImagePromptEncoder {
  private constructor(
    private readonly tokenizer: transformers.PreTrainedTokenizer,
    private readonly session: ort.InferenceSession,
    private readonly output: string,
    readonly maxTokens: number,
  ) {}

  static async load(tokenizerDir: string, graphPath: string, maxTokens: number, opts: { device: OnnxBackend; threads: number }): Promise<ZImagePromptEncoder> {
    transformers.env.allowRemoteModels = false;
    const tokenizer = await transformers.AutoTokenizer.from_pretrained(tokenizerDir, { local_files_only: true });
    const session = await ort.InferenceSession.create(graphPath, {
      executionProviders: [opts.device],
      intraOpNumThreads: opts.threads,
      interOpNumThreads: 1,
      graphOptimizationLevel: "all",
    });
    for (const name of ["input_ids", "attention_mask"])
      if (!session.inputNames.includes(name)) {
        await session.release();
        throw new Error(`${graphPath}: the text encoder must take input_ids and attention_mask (it takes ${session.inputNames.join(", ")})`);
      }
    const output = ["encoder_hidden_states", "encoder_hidden_state", "last_hidden_state"].find((n) => session.outputNames.includes(n)) ?? session.outputNames[0]!;
    return new ZImagePromptEncoder(tokenizer, session, output, maxTokens);
  }

  async encode(prompt: string): Promise<PromptEmbedding> {
    const enc = this.tokenizer(zImagePromptText(prompt), { padding: false, truncation: true, max_length: this.maxTokens, add_special_tokens: false }) as unknown as {
      input_ids: transformers.Tensor;
    };
    const ids = Array.from(enc.input_ids.data as ArrayLike<bigint | number>, Number);
    const dims = [1, ids.length];
    const feeds: Record<string, ort.Tensor> = {
      input_ids: toTensor(inputMeta(this.session, "input_ids"), Float32Array.from(ids), dims),
      attention_mask: toTensor(inputMeta(this.session, "attention_mask"), new Float32Array(ids.length).fill(1), dims),
    };
    const out = (await this.session.run(feeds))[this.output]!;
    return { hidden: toFloat32(out), hiddenDims: [...out.dims], pooled: null };
  }

  async dispose(): Promise<void> {
    await this.session.release();
  }
}
