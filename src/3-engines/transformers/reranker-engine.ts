import { RerankQueryTooLong, type RerankerEngine, type RerankPair, type TokenizedItem } from "../types";
import { mapInSlices, type EncoderOptions, type Tokenizer } from "./encoder";
import { EncoderEngine } from "./encoder-engine";
import { readRerankerFolder, type RerankerInfo } from "./model-folder";

// A cross-encoder reranker on transformers.js: each (query, document) pair goes through the
// tokenizer's own pair template — [CLS] query [SEP] document [SEP] for BERT (token_type_ids 0…0 1…1),
// <s> query </s></s> document </s> for XLM-RoBERTa (bge-reranker-v2-m3) — never string
// concatenation, and the model gives one relevance per pair (encoder-worker.ts: the sigmoid of its
// one logit, or the positive label's softmax). Sequences of concurrent requests share model runs.
//
// Too long a pair is cut from the document's end only, as Hugging Face's truncation="only_second":
// the query and the special tokens stay. transformers.js 4.3.1 cannot do that itself (its
// `truncation` cuts the whole sequence's end, special tokens included), so the document's tokens
// are removed from the encoded pair: each text of a pair is tokenized on its own before the
// template joins them (tokenizers' TemplateProcessing, BertProcessing, RobertaProcessing), so the
// pair is prefix + query + middle + document + suffix, and cutting k tokens from the document is
// removing the k tokens before the suffix.

/** Where the template puts its special tokens around a pair, found once by encoding a probe pair. */
interface PairTemplate {
  /** Special tokens in a pair: prefix + middle + suffix. */
  specials: number;
  /** Special tokens after the document. */
  suffix: number;
}

/** The probe pair's texts: one plain word each, never a special token. */
const PROBE = { query: "a", document: "b" } as const;

export class TransformersRerankerEngine extends EncoderEngine<RerankerInfo, TokenizedItem, number> implements RerankerEngine {
  private template: PairTemplate | null = null;

  constructor(opts: EncoderOptions) {
    super(opts, "reranker", (item) => item.ids.length);
  }

  protected readFolder(folder: string) {
    return readRerankerFolder(folder);
  }

  protected setup(info: RerankerInfo) {
    return {
      head: { task: "reranker" as const, logits: info.logits, positive: info.positive },
      describe: { id2label: info.labels, relevance: info.logits === 1 ? "sigmoid(logit)" : `softmax[${info.positive}]` },
    };
  }

  async tokenizePairs(query: string, documents: string[], maxTokens = this.maxTokens): Promise<RerankPair[]> {
    const { tokenizer } = await this.encoder.ensure();
    const tpl = (this.template ??= pairTemplateOf(tokenizer));
    const queryTokens = tpl.specials + tokenizer.encode(query, { add_special_tokens: false }).length;
    if (queryTokens + 1 > maxTokens) throw new RerankQueryTooLong(queryTokens, maxTokens);
    // One segment embedding (XLM-RoBERTa: type_vocab_size 1): segment ids other than 0 would index
    // past it, so none are sent.
    const segments = (this.describe().typeVocabSize ?? 2) > 1;
    return mapInSlices(documents, (document) => {
      // transformers.js reads an empty text_pair as no pair at all: encode a probe document and
      // take its tokens out, which leaves the pair template with an empty second sequence.
      const empty = document === "";
      const enc = encodePair(tokenizer, query, empty ? PROBE.document : document);
      const docTokens = enc.ids.length - queryTokens;
      if (docTokens < 0) throw new Error(`the tokenizer's pair (${enc.ids.length} tokens) is shorter than its query part (${queryTokens})`);
      const cut = empty ? 0 : Math.max(0, enc.ids.length - maxTokens);
      return withoutDocumentTail(segments ? enc : { ids: enc.ids }, empty ? docTokens : cut, tpl.suffix, cut);
    });
  }

  rerank(pairs: TokenizedItem[], signal?: AbortSignal): Promise<number[]> {
    return this.submit(pairs, signal);
  }

  protected async run(items: TokenizedItem[]): Promise<number[]> {
    const { data } = await this.encoder.forward(items.map((item) => ({ ids: item.ids, types: item.typeIds })));
    return Array.from(data.subarray(0, items.length));
  }
}

/** The pair through the tokenizer's template; segment ids where its class returns them (BERT yes, XLM-RoBERTa no), as in Python. */
function encodePair(tokenizer: Tokenizer, query: string, document: string): { ids: number[]; typeIds?: number[] } {
  const enc = tokenizer(query, { text_pair: document, return_tensor: false });
  return { ids: enc.input_ids as number[], typeIds: enc.token_type_ids as number[] | undefined };
}

/** The pair without the `drop` tokens that end its document; segment ids kept only when some is non-zero. */
function withoutDocumentTail(enc: { ids: number[]; typeIds?: number[] }, drop: number, suffix: number, cut: number): RerankPair {
  const end = enc.ids.length - suffix;
  const trim = (v: number[]) => (drop ? [...v.slice(0, end - drop), ...v.slice(end)] : v);
  const ids = trim(enc.ids);
  const typeIds = enc.typeIds ? trim(enc.typeIds) : undefined;
  return typeIds?.some((t) => t !== 0) ? { ids, typeIds, cut } : { ids, cut };
}

/**
 * The template's special tokens around a pair: the probe pair encoded whole, and each probe text
 * alone, give how many special tokens the pair has and how many follow the document.
 */
export function pairTemplateOf(tokenizer: Tokenizer): PairTemplate {
  const q = tokenizer.encode(PROBE.query, { add_special_tokens: false });
  const d = tokenizer.encode(PROBE.document, { add_special_tokens: false });
  const full = encodePair(tokenizer, PROBE.query, PROBE.document).ids;
  const specials = full.length - q.length - d.length;
  const matches = (at: number, part: number[]) => part.every((id, k) => full[at + k] === id);
  let suffix = 0;
  while (suffix <= specials && !matches(full.length - suffix - d.length, d)) suffix++;
  let prefix = 0;
  while (prefix <= specials && !matches(prefix, q)) prefix++;
  if (specials < 0 || suffix > specials || prefix + suffix > specials)
    throw new Error(`cannot find the tokenizer's pair template (probe pair ${JSON.stringify(full)}, query ${JSON.stringify(q)}, document ${JSON.stringify(d)})`);
  return { specials, suffix };
}
