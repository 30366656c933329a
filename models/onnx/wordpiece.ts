import { WORDPIECE_CORPUS } from "./corpus";

// A BERT WordPiece tokenizer in the Hugging Face `tokenizers` JSON format, with its vocabulary
// built from a small corpus: the special tokens first (as BERT: [PAD] [UNK] [CLS] [SEP] [MASK]),
// then every printable ASCII character and its "##" continuation (so nothing common is [UNK]),
// a few common suffixes, and the corpus's words by frequency.

export const SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] as const;

const SUFFIXES = ["s", "es", "ed", "ing", "ly", "er", "est", "ion", "ment", "ness", "able", "ful"];

/** The vocabulary in id order. */
export function buildVocab(corpus = WORDPIECE_CORPUS): string[] {
  const vocab: string[] = [...SPECIAL_TOKENS];
  const seen = new Set<string>(vocab);
  const add = (t: string) => {
    if (!seen.has(t)) {
      seen.add(t);
      vocab.push(t);
    }
  };
  const chars = Array.from({ length: 0x7e - 0x21 + 1 }, (_, i) => String.fromCharCode(0x21 + i)).filter((c) => c === c.toLowerCase());
  for (const c of chars) add(c);
  for (const c of chars) add(`##${c}`);
  for (const s of SUFFIXES) add(`##${s}`);
  const counts = new Map<string, number>();
  for (const w of corpus.toLowerCase().match(/[a-z0-9]+/g) ?? []) counts.set(w, (counts.get(w) ?? 0) + 1);
  const words = [...counts].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).map(([w]) => w);
  for (const w of words) add(w);
  return vocab;
}

const ids = (vocab: string[]) => Object.fromEntries(vocab.map((t, i) => [t, i]));

/** tokenizer.json: BertNormalizer (lowercase), BertPreTokenizer, WordPiece, [CLS] A [SEP] (B [SEP]) template. */
export function tokenizerJson(vocab: string[]) {
  const id = ids(vocab);
  const special = (t: string, typeId: number) => ({ SpecialToken: { id: t, type_id: typeId } });
  const seq = (s: "A" | "B", typeId: number) => ({ Sequence: { id: s, type_id: typeId } });
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: SPECIAL_TOKENS.map((t) => ({
      id: id[t],
      content: t,
      single_word: false,
      lstrip: false,
      rstrip: false,
      normalized: false,
      special: true,
    })),
    normalizer: { type: "BertNormalizer", clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
    pre_tokenizer: { type: "BertPreTokenizer" },
    post_processor: {
      type: "TemplateProcessing",
      single: [special("[CLS]", 0), seq("A", 0), special("[SEP]", 0)],
      pair: [special("[CLS]", 0), seq("A", 0), special("[SEP]", 0), seq("B", 1), special("[SEP]", 1)],
      special_tokens: Object.fromEntries(["[CLS]", "[SEP]"].map((t) => [t, { id: t, ids: [id[t]], tokens: [t] }])),
    },
    decoder: { type: "WordPiece", prefix: "##", cleanup: true },
    model: { type: "WordPiece", unk_token: "[UNK]", continuing_subword_prefix: "##", max_input_chars_per_word: 100, vocab: id },
  };
}

/** tokenizer_config.json as a BERT export writes it; `model_max_length` is the tokenizer's length limit. */
export function tokenizerConfigJson(modelMaxLength: number) {
  return {
    tokenizer_class: "BertTokenizer",
    model_max_length: modelMaxLength,
    do_lower_case: true,
    strip_accents: null,
    tokenize_chinese_chars: true,
    clean_up_tokenization_spaces: true,
    cls_token: "[CLS]",
    sep_token: "[SEP]",
    pad_token: "[PAD]",
    unk_token: "[UNK]",
    mask_token: "[MASK]",
  };
}

export function specialTokensMapJson() {
  return { cls_token: "[CLS]", sep_token: "[SEP]", pad_token: "[PAD]", unk_token: "[UNK]", mask_token: "[MASK]" };
}
