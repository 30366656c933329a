import type { ClassifierEngine, ClassifyItem, TokenizedItem } from "../types";
import { mapInSlices, type EncoderOptions } from "./encoder";
import { EncoderEngine } from "./encoder-engine";
import { readClassifierFolder, type ClassifierInfo } from "./model-folder";

// Three-class NLI on transformers.js. Pairs go through the tokenizer's own (text, text_pair)
// template — e.g. [CLS] premise [SEP] hypothesis [SEP] with token_type_ids 0…0 1…1 — never string
// concatenation; raw strings are tokenized as given. (transformers.js's text-classification
// pipeline would tokenize {text, text_pair} objects as empty text: platform notes.) The softmax
// of the logits is reordered from the model's id2label to the API's [contradiction, entailment,
// neutral]. Sequences of concurrent requests share model runs (encoder-engine.ts).

type Probs = [number, number, number];

export class TransformersClassifierEngine extends EncoderEngine<ClassifierInfo, TokenizedItem, Probs> implements ClassifierEngine {
  constructor(opts: EncoderOptions) {
    super(opts, "classifier", (item) => item.ids.length);
  }

  protected readFolder(folder: string) {
    return readClassifierFolder(folder);
  }

  protected setup(info: ClassifierInfo) {
    return { head: { task: "classifier" as const, logitIndex: info.logitIndex }, describe: { id2label: info.labels, logit_index: info.logitIndex } };
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
    return this.submit(items, signal);
  }

  protected async run(items: TokenizedItem[]): Promise<Probs[]> {
    const { data } = await this.encoder.forward(items.map((item) => ({ ids: item.ids, types: item.typeIds })));
    return items.map((_, b) => [data[b * 3]!, data[b * 3 + 1]!, data[b * 3 + 2]!]);
  }
}
