import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { LlamaModel } from "node-llama-cpp";
import { ensureChatModel } from "../../models/cache";
import { vocabFor } from "../../models/generate-chat";
import { BPE_CORPUS } from "../../models/gguf/corpus";
import { SPECIAL_TOKENS, TokenType, bytesToUnicode, encodeBpe, pretokenize, trainBpe } from "../../models/gguf/bpe";
import { CHAT_PRESETS } from "../../models/presets";
import { testLlama } from "./llama";

const vocab = vocabFor(CHAT_PRESETS.chat);

const TRICKY_TEXTS = [
  "Hello, world! The quick brown fox jumps over the lazy dog.",
  "Emoji 🌍🚀👩‍👩‍👧 and accents: déjà vu, naïve, Ærøskøbing, straße",
  "日本語のテキスト, 中文, 한국어, Ελληνικά, русский, עברית, العربية",
  '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}',
  "def f(x):\n\treturn x ** 2  # square\n\n\n  trailing   spaces   \r\n",
  "Numbers 1234567890 3.14159 -42 1e-9; I'm sure they'RE here, we'll see.",
  "control \u0000\u0001\u001f bytes and a lone \uFFFD",
];

describe("byte-level BPE vocabulary", () => {
  test("the 256 byte tokens use GPT-2's bytes_to_unicode alphabet", () => {
    const map = bytesToUnicode();
    expect(new Set(map).size).toBe(256);
    expect(map[0x21]).toBe("!");
    expect(map[0x20]).toBe("Ġ");
    expect(map[0x0a]).toBe("Ċ");
    expect(map[0xad]).toBe("Ń"); // the 68th remapped byte: U+0100 + 67
    expect(map[0xff]).toBe("ÿ");
    expect(vocab.tokens.slice(0, 256)).toEqual(map);
  });

  test("training merges the most frequent pair first and breaks ties by smallest pair", () => {
    // "lo" pairs: 3x "low" + 2x "lower" = 5; "ow" also 5 -> tie, "l o" < "o w".
    expect(trainBpe("low low low lower lower", { maxMerges: 3 })).toEqual(["l o", "lo w", "Ġ low"]);
  });

  test("training on the embedded corpus is deterministic", () => {
    const a = trainBpe(BPE_CORPUS, { maxMerges: 200 });
    const b = trainBpe(BPE_CORPUS, { maxMerges: 200 });
    expect(a).toEqual(b);
    expect(a.slice(0, 3)).toEqual(["Ġ t", "Ġ a", "h e"]);
  });

  test("the vocabulary has byte tokens, real merges and control tokens at the end", () => {
    expect(vocab.tokens.length).toBeGreaterThanOrEqual(1000);
    expect(vocab.tokens.length).toBeLessThanOrEqual(2048);
    expect(vocab.merges.length).toBeGreaterThanOrEqual(vocab.tokens.length - 256 - SPECIAL_TOKENS.length);
    expect(new Set(vocab.tokens).size).toBe(vocab.tokens.length);
    for (const merge of vocab.merges) expect(merge.split(" ")).toHaveLength(2);
    expect(vocab.tokens).toContain("Ġthe");
    const specialIds = SPECIAL_TOKENS.map((t) => vocab.special[t]);
    expect(specialIds).toEqual(SPECIAL_TOKENS.map((_, i) => vocab.tokens.length - SPECIAL_TOKENS.length + i));
    for (const id of specialIds) expect(vocab.tokenTypes[id]).toBe(TokenType.CONTROL);
    expect(vocab.tokenTypes.filter((t) => t === TokenType.NORMAL)).toHaveLength(vocab.tokens.length - SPECIAL_TOKENS.length);
  });

  test("the qwen2 pre-tokenizer splits digits one by one and keeps a leading space on words", () => {
    expect(pretokenize("I'm 42 years")).toEqual(["I", "'m", " ", "4", "2", " years"]);
  });
});

describe("the tokenizer inside the generated model", () => {
  let model: LlamaModel;
  beforeAll(async () => {
    const llama = await testLlama();
    model = await llama.loadModel({ modelPath: await ensureChatModel("chat") });
  });
  afterAll(() => model?.dispose());

  test("each special token tokenizes to one control token and detokenizes back", () => {
    for (const text of SPECIAL_TOKENS) {
      const tokens = model.tokenize(text, true);
      expect(tokens).toEqual([vocab.special[text] as never]);
      expect(model.getTokenAttributes(tokens[0]!).control).toBe(true);
      expect(model.detokenize(tokens, true)).toBe(text);
    }
  });

  test("special tokens inside text are single tokens only when special-token parsing is on", () => {
    const text = "a<think>b</think><tool_call>c";
    const parsed = model.tokenize(text, true);
    expect(parsed).toContain(vocab.special["<think>"] as never);
    expect(parsed).toContain(vocab.special["<tool_call>"] as never);
    expect(model.detokenize(parsed, true)).toBe(text);
    const plain = model.tokenize("<think>", false);
    expect(plain.length).toBeGreaterThan(1);
    expect(model.detokenize(plain)).toBe("<think>");
  });

  test("eos is <|im_end|>, padding is <|endoftext|> and no BOS is prepended", () => {
    expect(model.tokens.eosString).toBe("<|im_end|>");
    expect(model.tokens.shouldPrependBosToken).toBe(false);
    expect(model.isEogToken(vocab.special["<|im_end|>"] as never)).toBe(true);
    expect(model.isEogToken(vocab.special["<|endoftext|>"] as never)).toBe(true);
    expect(model.fileInfo.metadata.tokenizer.ggml.padding_token_id).toBe(vocab.special["<|endoftext|>"]);
    expect(model.tokenize("hi")).toEqual(model.tokenize("hi", true));
  });

  test("arbitrary text including unicode, emoji and control bytes round-trips", () => {
    for (const text of TRICKY_TEXTS) expect(model.detokenize(model.tokenize(text))).toBe(text);
  });

  test("llama.cpp tokenizes exactly like the reference BPE encoder, so the merges are really used", () => {
    for (const text of [BPE_CORPUS, ...TRICKY_TEXTS]) expect([...model.tokenize(text)]).toEqual(encodeBpe(vocab, text) as never[]);
    const tokens = model.tokenize(" the weather");
    expect(tokens.map((t) => vocab.tokens[t])).toEqual(["Ġthe", "Ġweather"]);
  });
});
