import { ApiError } from "../../errors";
import type { EmbeddingEngine, EmbeddingInput } from "../types";
import { Encoder, mapInSlices, type EncoderOptions, type Tokenizer } from "./encoder";
import { MicroBatcher } from "./micro-batcher";
import { readEmbedderFolder, type EmbedderInfo } from "./model-folder";

// Sentence embeddings on transformers.js: the model's tokenizer and template, the ONNX encoder,
// the folder's sentence-transformers pooling, then L2 normalisation. Sequences of concurrent
// requests share model runs (micro-batcher). Token-id inputs are the ids of the model's own
// vocabulary without special tokens; the template's special tokens are added as for text.

export class TransformersEmbeddingEngine implements EmbeddingEngine {
  private info: EmbedderInfo | null = null;
  private readonly encoder: Encoder;
  private readonly batcher: MicroBatcher<number[], Float32Array>;
  private template: { prefix: number[]; suffix: number[]; vocabSize: number } | null = null;

  constructor(private readonly opts: EncoderOptions) {
    this.encoder = new Encoder(opts, "embedding", () => {
      const info = this.describe();
      const describe = { dimensions: info.dimensions, max_tokens: this.maxTokens, pooling: info.pooling, pooling_source: info.poolingSource };
      return { dtype: info.dtype, head: { task: "embedding", pooling: info.pooling }, describe };
    });
    this.batcher = new MicroBatcher((seqs) => this.run(seqs), (s) => s.length, opts.batch);
  }

  get modelId() {
    return this.opts.modelId;
  }
  get loaded() {
    return this.encoder.loaded;
  }
  get device() {
    return this.encoder.device;
  }
  get dimensions() {
    return this.describe().dimensions;
  }
  get maxTokens() {
    return Math.min(this.describe().maxTokens, this.opts.maxContext ?? Infinity);
  }
  /** Model runs so far: fewer than requests when concurrent requests were batched. */
  get runs() {
    return this.batcher.runs;
  }
  /** ONNX session calls so far (a batch is length-sorted and may take several). */
  get modelCalls() {
    return this.encoder.calls;
  }

  /** The folder's description (read once, at load or first question). */
  describe(): EmbedderInfo {
    return (this.info ??= readEmbedderFolder(this.opts.folder));
  }

  async load(): Promise<void> {
    await this.encoder.ensure();
  }

  async unload(): Promise<void> {
    await this.encoder.unload();
  }

  async tokenize(inputs: EmbeddingInput[], maxTokens = Infinity): Promise<number[][]> {
    const { tokenizer } = await this.encoder.ensure();
    // The template is the tokenizer's: found once, by encoding a probe word.
    const tpl = (this.template ??= templateOf(tokenizer, this.describe().vocabSize));
    return mapInSlices(inputs, (input, i) => {
      if (typeof input === "string") return tokenizer.encode(input);
      const bad = input.findIndex((id) => !Number.isInteger(id) || id < 0 || id >= tpl.vocabSize);
      if (bad >= 0)
        throw new ApiError("invalid_request", `input[${i}][${bad}]: token id ${input[bad]} is not in the model's vocabulary (0 to ${tpl.vocabSize - 1})`, {
          param: `input[${i}]`,
        });
      return [...tpl.prefix, ...input, ...tpl.suffix];
    }, undefined, (ids) => ids.length > maxTokens);
  }

  embed(tokens: number[][], signal?: AbortSignal): Promise<Float32Array[]> {
    return this.batcher.submit(tokens, signal);
  }

  private async run(seqs: number[][]): Promise<Float32Array[]> {
    const { width, data } = await this.encoder.forward(seqs.map((ids) => ({ ids })));
    return seqs.map((_, b) => Float32Array.from(data.subarray(b * width, (b + 1) * width)));
  }
}

/** The special tokens the template puts around one sequence, found by encoding a probe word. */
function templateOf(tokenizer: Tokenizer, vocabSize?: number) {
  const probe = "a";
  const inner = tokenizer.encode(probe, { add_special_tokens: false });
  const full = tokenizer.encode(probe);
  let at = 0;
  while (at + inner.length <= full.length && inner.some((id, k) => full[at + k] !== id)) at++;
  if (at + inner.length > full.length) throw new Error("cannot find the tokenizer's single-sequence template");
  return { prefix: full.slice(0, at), suffix: full.slice(at + inner.length), vocabSize: vocabSize ?? vocabLength(tokenizer) };
}

function vocabLength(tokenizer: Tokenizer): number {
  const v = tokenizer.get_vocab() as Map<string, number> | Record<string, number>;
  return v instanceof Map ? v.size : Object.keys(v).length;
}
