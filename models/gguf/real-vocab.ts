// Vocabularies of a real model's size for sparse GGUF headers. The token strings are synthetic: the
// planner needs only the count (it sizes the output buffer, vocab × batch floats), and the metadata
// keeps the shape llama.cpp's vocabulary loader accepts (src/llama-vocab.cpp: special token ids in
// range, a newline token it can find, BPE merges for a gpt2-type tokenizer), so a tool that loads
// the vocabulary from the header does not fail on it.

import { GgufValueType, arr, bool, str, u32, type GgufValue } from "./types";

/** llama.cpp token types (include/llama.h, enum llama_token_type). */
const NORMAL = 1;
const UNKNOWN = 2;
const CONTROL = 3;
const USER_DEFINED = 4;
const UNUSED = 5;
const BYTE = 6;

type Entry = readonly [string, GgufValue];

/**
 * A SentencePiece ("llama") vocabulary of `size` tokens, as Gemma's converter writes it
 * (conversion/base.py _set_vocab_sentencepiece): tokens, scores, token types; `specials` pins
 * control tokens at their real ids. Byte tokens <0x00>..<0xFF> are there so the loader finds "\n".
 */
export function sentencePieceVocab(size: number, specials: Record<number, string>, ids: { bos: number; eos: number; unk: number; pad: number }): Entry[] {
  const tokens: string[] = new Array(size);
  const types: number[] = new Array(size);
  const scores: number[] = new Array(size);
  for (let i = 0; i < size; i++) {
    tokens[i] = `\u2581t${i}`;
    types[i] = NORMAL;
    scores[i] = -i;
  }
  const byteStart = 1000; // any free range; the real vocabulary has its byte tokens elsewhere
  for (let b = 0; b < 256; b++) {
    tokens[byteStart + b] = `<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`;
    types[byteStart + b] = BYTE;
  }
  for (const [id, text] of Object.entries(specials)) {
    tokens[Number(id)] = text;
    types[Number(id)] = Number(id) === ids.unk ? UNKNOWN : CONTROL;
  }
  return [
    ["tokenizer.ggml.model", str("llama")],
    ["tokenizer.ggml.pre", str("default")],
    ["tokenizer.ggml.tokens", arr(GgufValueType.STRING, tokens)],
    ["tokenizer.ggml.scores", arr(GgufValueType.FLOAT32, scores)],
    ["tokenizer.ggml.token_type", arr(GgufValueType.INT32, types)],
    ["tokenizer.ggml.bos_token_id", u32(ids.bos)],
    ["tokenizer.ggml.eos_token_id", u32(ids.eos)],
    ["tokenizer.ggml.unknown_token_id", u32(ids.unk)],
    ["tokenizer.ggml.padding_token_id", u32(ids.pad)],
    ["tokenizer.ggml.add_bos_token", bool(true)],
    ["tokenizer.ggml.add_eos_token", bool(false)],
    ["tokenizer.ggml.add_space_prefix", bool(false)],
  ];
}

/** GPT-2's byte-to-unicode table (the first 256 tokens of a byte-level BPE vocabulary). */
function byteLevelChars(): string[] {
  const direct: number[] = [];
  for (let c = 0x21; c <= 0x7e; c++) direct.push(c);
  for (let c = 0xa1; c <= 0xac; c++) direct.push(c);
  for (let c = 0xae; c <= 0xff; c++) direct.push(c);
  const out: string[] = new Array(256);
  let next = 256;
  for (let b = 0; b < 256; b++) out[b] = String.fromCodePoint(direct.includes(b) ? b : next++);
  return out;
}

/**
 * A byte-level BPE ("gpt2") vocabulary of `size` tokens, as Qwen's converter writes it
 * (conversion/base.py get_vocab_base: added tokens at their ids, `[PAD{i}]` up to the config's
 * vocab_size). Only a few merges: llama.cpp needs the key, not the real 151k merges.
 */
export function byteLevelBpeVocab(
  size: number,
  pre: string,
  specials: Record<number, { text: string; control: boolean }>,
  ids: { bos: number; eos: number; pad: number; firstPad: number },
): Entry[] {
  const tokens: string[] = new Array(size);
  const types: number[] = new Array(size);
  const bytes = byteLevelChars();
  for (let i = 0; i < size; i++) {
    tokens[i] = i < 256 ? bytes[i]! : i >= ids.firstPad ? `[PAD${i}]` : `w${i}`;
    types[i] = i >= ids.firstPad ? UNUSED : NORMAL;
  }
  for (const [id, s] of Object.entries(specials)) {
    tokens[Number(id)] = s.text;
    types[Number(id)] = s.control ? CONTROL : USER_DEFINED;
  }
  const space = bytes[0x20]!;
  return [
    ["tokenizer.ggml.model", str("gpt2")],
    ["tokenizer.ggml.pre", str(pre)],
    ["tokenizer.ggml.tokens", arr(GgufValueType.STRING, tokens)],
    ["tokenizer.ggml.token_type", arr(GgufValueType.INT32, types)],
    ["tokenizer.ggml.merges", arr(GgufValueType.STRING, [`${space} ${space}`, `${space} t`, "t h"])],
    ["tokenizer.ggml.eos_token_id", u32(ids.eos)],
    ["tokenizer.ggml.padding_token_id", u32(ids.pad)],
    ["tokenizer.ggml.bos_token_id", u32(ids.bos)],
    ["tokenizer.ggml.add_bos_token", bool(false)],
  ];
}
