import type { ClassifierEngine, ClassifyItem, TokenizedItem } from "../types";
import { Encoder, mapInSlices, type EncoderOptions } from "./encoder";
import { MicroBatcher } from "./micro-batcher";
import { readClassifierFolder, type ClassifierInfo } from "./model-folder";

// Three-class NLI on transformers.js. Pairs go through the tokenizer's own (text, text_pair)
// template — e.g. [CLS] premise [SEP] hypothesis [SEP] with token_type_ids 0…0 1…1 — never string
// concatenation; raw strings are tokenized as given. (transformers.js's text-classification
// pipeline would tokenize {text, text_pair} objects as empty text: platform notes.) The softmax
// of the logits is reordered from the model's id2label to the API's [contradiction, entailment,
// neutral]. Sequences of concurrent requests share model runs.

type Probs = [number, number, number];

export class TransformersClassifierEngine implements ClassifierEngine {
  private info: ClassifierInfo | null = null;
  private readonly encoder: Encoder;
  private readonly batcher: MicroBatcher<TokenizedItem, Probs>;

  constructor(private readonly opts: EncoderOptions) {
    this.encoder = new Encoder(opts, "classifier", () => {
      const info = this.describe();
      const describe = { max_tokens: this.maxTokens, id2label: info.labels, logit_index: info.logitIndex };
      return { dtype: info.dtype, head: { task: "classifier", logitIndex: info.logitIndex }, describe };
    });
    this.batcher = new MicroBatcher((items) => this.run(items), (item) => item.ids.length, opts.batch);
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
  get maxTokens() {
    return Math.min(this.describe().maxTokens, this.opts.maxContext ?? Infinity);
  }
  get runs() {
    return this.batcher.runs;
  }
  /** ONNX session calls so far (a batch is length-sorted and may take several). */
  get modelCalls() {
    return this.encoder.calls;
  }

  describe(): ClassifierInfo {
    return (this.info ??= readClassifierFolder(this.opts.folder));
  }

  async load(): Promise<void> {
    await this.encoder.ensure();
  }

  async unload(): Promise<void> {
    await this.encoder.unload();
  }

  async tokenize(items: ClassifyItem[], maxTokens = Infinity): Promise<TokenizedItem[]> {
    const { tokenizer } = await this.encoder.ensure();
    return mapInSlices(items, (item) => {
      const enc =
        "text" in item
          ? tokenizer(item.text, { return_tensor: false, return_token_type_ids: true })
          : tokenizer(item.premise, { text_pair: item.hypothesis, return_tensor: false, return_token_type_ids: true });
      const ids = enc.input_ids as number[];
      const typeIds = enc.token_type_ids as number[] | undefined;
      return typeIds?.some((t) => t !== 0) ? { ids, typeIds } : { ids };
    }, undefined, (t) => t.ids.length > maxTokens);
  }

  classify(items: TokenizedItem[], signal?: AbortSignal): Promise<Probs[]> {
    return this.batcher.submit(items, signal);
  }

  private async run(items: TokenizedItem[]): Promise<Probs[]> {
    const { data } = await this.encoder.forward(items.map((item) => ({ ids: item.ids, types: item.typeIds })));
    return items.map((_, b) => [data[b * 3]!, data[b * 3 + 1]!, data[b * 3 + 2]!]);
  }
}
