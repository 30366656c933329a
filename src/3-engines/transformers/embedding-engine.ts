import { ApiError } from "../../lib/errors";
import type { EmbeddingEngine, EmbeddingInput } from "../types";
import { mapInSlices, type EncoderOptions, type Tokenizer } from "./encoder";
import { EncoderEngine } from "./encoder-engine";
import { readEmbedderFolder, type EmbedderInfo } from "./model-folder";

// Sentence embeddings on transformers.js: the model's tokenizer and template, the ONNX encoder,
// the folder's sentence-transformers pooling, then L2 normalisation. Sequences of concurrent
// requests share model runs (encoder-engine.ts). Token-id inputs are the ids of the model's own
// vocabulary without special tokens; the template's special tokens are added as for text.

export class TransformersEmbeddingEngine extends EncoderEngine<EmbedderInfo, number[], Float32Array> implements EmbeddingEngine {
  private template: { prefix: number[]; suffix: number[]; vocabSize: number } | null = null;

  constructor(opts: EncoderOptions) {
    super(opts, "embedding", (seq) => seq.length);
  }

  protected readFolder(folder: string) {
    return readEmbedderFolder(folder);
  }

  protected setup(info: EmbedderInfo) {
    return { head: { task: "embedding" as const, pooling: info.pooling }, describe: { dimensions: info.dimensions, pooling: info.pooling, pooling_source: info.poolingSource } };
  }

  get dimensions() {
    return this.describe().dimensions;
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
    return this.submit(tokens, signal);
  }

  protected async run(seqs: number[][]): Promise<Float32Array[]> {
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
