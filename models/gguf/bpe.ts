// Byte-level BPE of the GPT-2 kind: the 256 byte tokens in the bytes_to_unicode alphabet, plus merges
// trained deterministically on the embedded corpus, plus control tokens for chat and tool calling.
// Produces the tokenizer.ggml.* arrays for a `gpt2` tokenizer with the `qwen2` pre-tokenizer.

import { BPE_CORPUS } from "./corpus";

/** llama.cpp token types (tokenizer.ggml.token_type). */
export enum TokenType {
  NORMAL = 1,
  UNKNOWN = 2,
  CONTROL = 3,
  USER_DEFINED = 4,
  UNUSED = 5,
  BYTE = 6,
}

/** Special tokens, appended after the BPE vocabulary in this order. */
export const SPECIAL_TOKENS = [
  "<|endoftext|>",
  "<|im_start|>",
  "<|im_end|>",
  "<think>",
  "</think>",
  "<tool_call>",
  "</tool_call>",
  "<tool_response>",
  "</tool_response>",
] as const;
export type SpecialToken = (typeof SPECIAL_TOKENS)[number];

/**
 * GPT-2's reversible byte -> printable character map: printable Latin-1 bytes map to themselves, the
 * others (controls, space, etc.) to code points from U+0100 upwards, in byte order.
 */
export function bytesToUnicode(): string[] {
  const keep = (b: number) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  const map: string[] = new Array(256);
  let next = 256;
  for (let b = 0; b < 256; b++) map[b] = String.fromCodePoint(keep(b) ? b : next++);
  return map;
}

const BYTE_CHARS = bytesToUnicode();
const encoder = new TextEncoder();

/** UTF-8 bytes of `text` spelled in the byte-unicode alphabet. */
export function toByteChars(text: string): string {
  let out = "";
  for (const b of encoder.encode(text)) out += BYTE_CHARS[b];
  return out;
}

/** The Qwen2 pre-tokenizer split (contractions, letters, single digits, punctuation runs, spaces). */
const QWEN2_SPLIT =
  /'(?:[sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+/gu;

export function pretokenize(text: string): string[] {
  return text.match(QWEN2_SPLIT) ?? [];
}

export interface BpeTrainOptions {
  /** Stop after this many merges. */
  maxMerges: number;
  /** Stop when the most frequent pair occurs fewer times than this. */
  minPairCount?: number;
}

/**
 * Classic BPE training: start from byte symbols of each pre-token, repeatedly merge the most frequent
 * adjacent pair (weighted by pre-token frequency). Ties go to the lexicographically smallest pair, so
 * the result is fully deterministic. Returns merges as "left right" strings, in rank order.
 */
export function trainBpe(corpus: string, options: BpeTrainOptions): string[] {
  const minPairCount = options.minPairCount ?? 2;
  const counts = new Map<string, number>();
  for (const piece of pretokenize(corpus)) {
    const word = toByteChars(piece);
    counts.set(word, (counts.get(word) ?? 0) + 1);
  }
  const words = [...counts.entries()]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([word, count]) => ({ symbols: [...word], count }));

  const merges: string[] = [];
  while (merges.length < options.maxMerges) {
    // Byte-unicode symbols never contain a plain space, so "left right" is an unambiguous pair key.
    const pairs = new Map<string, number>();
    for (const { symbols, count } of words) {
      for (let i = 0; i + 1 < symbols.length; i++) {
        const key = symbols[i] + " " + symbols[i + 1];
        pairs.set(key, (pairs.get(key) ?? 0) + count);
      }
    }
    let best: string | undefined;
    let bestCount = 0;
    for (const [key, count] of pairs) {
      if (count > bestCount || (count === bestCount && best !== undefined && key < best)) {
        best = key;
        bestCount = count;
      }
    }
    if (best === undefined || bestCount < minPairCount) break;
    merges.push(best);
    const space = best.indexOf(" ");
    const left = best.slice(0, space);
    const right = best.slice(space + 1);
    const joined = left + right;
    for (const word of words) {
      const s = word.symbols;
      if (s.length < 2) continue;
      const merged: string[] = [];
      for (let i = 0; i < s.length; i++) {
        if (i + 1 < s.length && s[i] === left && s[i + 1] === right) {
          merged.push(joined);
          i++;
        } else {
          merged.push(s[i]!);
        }
      }
      word.symbols = merged;
    }
  }
  return merges;
}

export interface BpeVocab {
  /** tokenizer.ggml.tokens */
  tokens: string[];
  /** tokenizer.ggml.token_type */
  tokenTypes: TokenType[];
  /** tokenizer.ggml.merges ("left right", in the byte-unicode alphabet) */
  merges: string[];
  /** Token id of each special token. */
  special: Record<SpecialToken, number>;
}

export interface BpeVocabOptions {
  /** Total vocabulary size including the 256 byte tokens and the special tokens (an upper bound). */
  vocabSize: number;
  /** Training text; defaults to the embedded corpus. */
  corpus?: string;
  minPairCount?: number;
}

const vocabCache = new Map<string, BpeVocab>();

/** Builds (and memoises) the vocabulary: byte tokens, merged tokens, then special tokens. */
export function buildBpeVocab(options: BpeVocabOptions): BpeVocab {
  const corpus = options.corpus ?? BPE_CORPUS;
  const key = `${options.vocabSize}/${options.minPairCount ?? 2}/${corpus.length}/${corpus}`;
  const cached = vocabCache.get(key);
  if (cached) return cached;
  const budget = options.vocabSize - 256 - SPECIAL_TOKENS.length;
  if (budget < 0) throw new Error(`vocabSize ${options.vocabSize} is too small for the byte and special tokens`);

  const tokens = [...BYTE_CHARS];
  const seen = new Set(tokens);
  const merges: string[] = [];
  // Train with some headroom: distinct pairs can join into the same string, which adds no token.
  for (const merge of trainBpe(corpus, { maxMerges: budget * 2, minPairCount: options.minPairCount })) {
    const joined = merge.replace(" ", "");
    if (!seen.has(joined)) {
      if (tokens.length - 256 >= budget) break;
      seen.add(joined);
      tokens.push(joined);
    }
    merges.push(merge);
  }
  const tokenTypes: TokenType[] = tokens.map(() => TokenType.NORMAL);
  const special = {} as Record<SpecialToken, number>;
  for (const text of SPECIAL_TOKENS) {
    special[text] = tokens.length;
    tokens.push(text);
    tokenTypes.push(TokenType.CONTROL);
  }
  const vocab = { tokens, tokenTypes, merges, special };
  vocabCache.set(key, vocab);
  return vocab;
}

/**
 * Reference encoder (no special-token parsing): pre-tokenize, then in each piece repeatedly apply
 * the lowest-ranked merge. Used by tests to check that llama.cpp tokenizes the same way.
 */
export function encodeBpe(vocab: BpeVocab, text: string): number[] {
  const ranks = new Map(vocab.merges.map((m, i) => [m, i]));
  const ids = new Map(vocab.tokens.map((t, i) => [t, i]));
  const out: number[] = [];
  for (const piece of pretokenize(text)) {
    let symbols = [...toByteChars(piece)];
    for (;;) {
      let bestRank = Infinity;
      let bestAt = -1;
      for (let i = 0; i + 1 < symbols.length; i++) {
        const rank = ranks.get(symbols[i] + " " + symbols[i + 1]);
        if (rank !== undefined && rank < bestRank) {
          bestRank = rank;
          bestAt = i;
        }
      }
      if (bestAt < 0) break;
      symbols = [...symbols.slice(0, bestAt), symbols[bestAt]! + symbols[bestAt + 1]!, ...symbols.slice(bestAt + 2)];
    }
    for (const s of symbols) {
      const id = ids.get(s);
      if (id !== undefined) out.push(id);
      else for (const ch of s) out.push(ids.get(ch)!);
    }
  }
  return out;
}
