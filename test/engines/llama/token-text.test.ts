import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import type { LlamaModel, Token } from "node-llama-cpp";
import { ensureChatModel } from "../../../models/cache";
import { writeSparseGguf } from "../../../models/gguf/sparse";
import { byteLevelBpeVocab, sentencePieceVocab } from "../../../models/gguf/real-vocab";
import { bool, str, u32, f32, type GgufValue } from "../../../models/gguf/types";
import { incompleteTail, OutputText, TokenPieces } from "../../../src/3-engines/llama/token-text";
import { tempDir } from "../../helpers/app";
import { testLlama } from "../../models/llama";

// A generation's text joined from per-token pieces (token-text.ts, native/pieces.cpp) is what
// llama.cpp's detokenize of the whole output gives, on each kind of vocabulary.

describe("incompleteTail: bytes at the end that begin a character not complete yet", () => {
  const cases: { name: string; bytes: number[]; expected: number }[] = [
    { name: "ASCII", bytes: [0x61, 0x62], expected: 0 },
    { name: "a two-byte lead alone", bytes: [0x61, 0xc3], expected: 1 },
    { name: "a two-byte character whole", bytes: [0xc3, 0xa9], expected: 0 },
    { name: "a three-byte character missing one", bytes: [0xe2, 0x82], expected: 2 },
    { name: "a four-byte character missing one", bytes: [0xf0, 0x9f, 0x98], expected: 3 },
    { name: "a four-byte character whole", bytes: [0xf0, 0x9f, 0x98, 0x80], expected: 0 },
    { name: "a lone continuation byte (invalid: complete as one U+FFFD)", bytes: [0x61, 0x80], expected: 0 },
    { name: "an invalid lead (F8)", bytes: [0xf8], expected: 0 },
    { name: "an overlong lead (C0)", bytes: [0xc0], expected: 0 },
    { name: "nothing", bytes: [], expected: 0 },
  ];
  for (const c of cases) test(c.name, () => expect(incompleteTail(new Uint8Array(c.bytes))).toBe(c.expected));
});

/** The output's text, token by token, as generation.ts joins it (invisible pieces left out). */
function joined(pieces: TokenPieces, tokens: readonly number[]): string {
  const out = new OutputText(pieces);
  let text = "";
  for (const t of tokens) {
    const p = out.push(t);
    if (p?.visible) text += p.text;
  }
  return text + (out.end()?.text ?? "");
}

/** A seeded stream of numbers (xorshift). */
function random(seed: number) {
  let x = seed >>> 0 || 1;
  return (n: number) => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) % n;
  };
}

describe("the generated chat model (byte-level BPE, qwen2)", () => {
  let model: LlamaModel;
  beforeAll(async () => {
    model = await (await testLlama()).loadModel({ modelPath: await ensureChatModel("chat"), vocabOnly: true });
  });
  afterAll(() => model.dispose());

  test("text with characters of 1 to 4 bytes, split across tokens, comes out whole", () => {
    const text = "Über die Brücke: 桥梁 🌉 costs €12, naïve café — done.";
    const tokens = model.tokenize(text);
    expect(joined(new TokenPieces(model), tokens)).toBe(text);
  });

  test("every byte token alone and random token runs are what detokenize gives for the whole run", () => {
    const pieces = new TokenPieces(model);
    const n = model.fileInfo.metadata.tokenizer.ggml.tokens.length;
    expect(n).toBeGreaterThan(256);
    const pick = random(29);
    for (let run = 0; run < 300; run++) {
      // byte-level tokens (partial characters, invalid sequences) mixed with whole ones
      const tokens = Array.from({ length: 1 + pick(12) }, () => (pick(2) ? pick(256) : pick(n)));
      const regular = tokens.filter((t) => model.detokenize([t as Token], false) !== "" || model.detokenize([t as Token], true) === "");
      expect({ tokens: regular, text: joined(pieces, regular) }).toEqual({ tokens: regular, text: model.detokenize(regular as Token[], false) });
    }
  });

  test("a control token has no shown text, only its written form", () => {
    const pieces = new TokenPieces(model);
    const [end] = model.tokenize("<|im_end|>", true);
    const out = new OutputText(pieces);
    expect(out.push(end!)).toEqual({ text: "<|im_end|>", visible: false, tokens: 1 });
  });

  test("cut off by max_tokens inside a character: its bytes are left out", () => {
    const pieces = new TokenPieces(model);
    const out = new OutputText(pieces);
    // "é" is C3 A9: the lead byte's token alone, then the output is cut
    const lead = model.tokenize("\u00c3")[0]!; // byte-level symbol of 0xC3
    expect(model.detokenize([lead], false)).toBe("\uFFFD");
    expect(out.push(lead, true)).toBeNull();
    expect(out.end()).toBeNull();
    // ended otherwise (end of generation), the half character is a U+FFFD
    const open = new OutputText(pieces);
    expect(open.push(lead)).toBeNull();
    expect(open.end()).toEqual({ text: "\uFFFD", visible: true, tokens: 1 });
  });
});

/** A vocabulary-only GGUF: the keys a llama architecture needs, and `vocab`. */
function vocabGguf(path: string, vocab: ReadonlyArray<readonly [string, GgufValue]>) {
  writeSparseGguf(path, {
    metadata: [
      ["general.architecture", str("llama")],
      ["general.name", str("vocab")],
      ["llama.block_count", u32(1)],
      ["llama.context_length", u32(256)],
      ["llama.embedding_length", u32(64)],
      ["llama.feed_forward_length", u32(128)],
      ["llama.attention.head_count", u32(4)],
      ["llama.attention.layer_norm_rms_epsilon", f32(1e-6)],
      ...vocab,
    ],
    tensors: [],
  });
}

describe("other vocabularies", () => {
  const dir = tempDir("token-text-");
  const models: LlamaModel[] = [];
  afterAll(async () => {
    for (const m of models) await m.dispose();
  });
  const load = async (name: string, vocab: ReadonlyArray<readonly [string, GgufValue]>) => {
    const path = join(dir, `${name}.gguf`);
    vocabGguf(path, vocab);
    const m = await (await testLlama()).loadModel({ modelPath: path, vocabOnly: true });
    models.push(m);
    return m;
  };

  test("SentencePiece with a space prefix: the space is dropped at the start of the output only", async () => {
    const entries = sentencePieceVocab(2000, { 0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>" }, { bos: 2, eos: 1, unk: 3, pad: 0 })
      .filter(([k]) => k !== "tokenizer.ggml.add_space_prefix");
    const m = await load("spm", [...entries, ["tokenizer.ggml.add_space_prefix", bool(true)]]);
    const tokens = [10, 11, 12, 13] as Token[];
    expect(m.detokenize(tokens, false)).toBe("t10 t11 t12 t13");
    expect(joined(new TokenPieces(m), tokens)).toBe("t10 t11 t12 t13");
    // byte tokens of a character split across them (<0xC3><0xA9>: é), after a word
    expect(joined(new TokenPieces(m), [10, 1000 + 0xc3, 1000 + 0xa9, 11])).toBe(m.detokenize([10, 1000 + 0xc3, 1000 + 0xa9, 11] as Token[], false));
  });

  test("a byte-level BPE that cleans up spaces (pre-tokenizer default): a token is cleaned as llama.cpp cleans it alone", async () => {
    const m = await load("bpe-default", byteLevelBpeVocab(600, "default", { 500: { text: " ,", control: false }, 501: { text: "<|end|>", control: true } }, { bos: 501, eos: 501, pad: 501, firstPad: 502 }));
    expect(m.detokenize([500 as Token], false)).toBe(",");
    const tokens = [300, 500, 301] as Token[];
    const pieces = new TokenPieces(m);
    expect(joined(pieces, tokens)).toBe(m.detokenize(tokens, false));
    expect(pieces.piece(500, false).spacePrefix).toBe(false);
  });
});
