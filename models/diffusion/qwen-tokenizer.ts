import { buildBpeVocab, SPECIAL_TOKENS } from "../gguf/bpe";
import { QWEN3_CHAT_TEMPLATE } from "../chat-template";

// Qwen3's tokenizer in the Hugging Face files a Qwen3 text encoder ships with (what the
// Z-Image-Turbo bundle's tokenizer/ folder holds): tokenizer.json (byte-level BPE, NFC, Qwen2's
// split pattern with its (?i:…) contractions, ChatML special tokens as added tokens) and
// tokenizer_config.json (Qwen2Tokenizer, no BOS, <|im_end|> as EOS, the chat template). The
// vocabulary and merges are the tiny chat models' (models/gguf/bpe.ts), so it is the same
// tokenizer the generated GGUFs carry.

const QWEN2_PATTERN = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;

export function qwenTokenizerFiles(vocabSize: number): { "tokenizer.json": string; "tokenizer_config.json": string; vocabSize: number } {
  const v = buildBpeVocab({ vocabSize, minPairCount: 1 });
  const vocab: Record<string, number> = {};
  v.tokens.forEach((t, i) => {
    if (!(SPECIAL_TOKENS as readonly string[]).includes(t)) vocab[t] = i;
  });
  const added = SPECIAL_TOKENS.map((content) => ({
    id: v.special[content],
    content,
    single_word: false,
    lstrip: false,
    rstrip: false,
    normalized: false,
    special: !content.startsWith("<think") && !content.startsWith("</think") && !content.includes("tool_"),
  }));
  const byteLevel = { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false };
  const tokenizer = {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: { type: "NFC" },
    pre_tokenizer: {
      type: "Sequence",
      pretokenizers: [{ type: "Split", pattern: { Regex: QWEN2_PATTERN }, behavior: "Isolated", invert: false }, byteLevel],
    },
    post_processor: byteLevel,
    decoder: byteLevel,
    model: {
      type: "BPE",
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: "",
      end_of_word_suffix: "",
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab,
      merges: v.merges.map((m) => m.split(" ")),
    },
  };
  const config = {
    add_bos_token: false,
    add_prefix_space: false,
    added_tokens_decoder: Object.fromEntries(added.map(({ id, ...rest }) => [String(id), rest])),
    bos_token: null,
    chat_template: QWEN3_CHAT_TEMPLATE,
    clean_up_tokenization_spaces: false,
    eos_token: "<|im_end|>",
    errors: "replace",
    model_max_length: 131072,
    pad_token: "<|endoftext|>",
    split_special_tokens: false,
    tokenizer_class: "Qwen2Tokenizer",
    unk_token: null,
  };
  return { "tokenizer.json": JSON.stringify(tokenizer), "tokenizer_config.json": JSON.stringify(config, null, 2), vocabSize: v.tokens.length };
}
