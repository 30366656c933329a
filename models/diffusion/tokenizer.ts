// A CLIP-style byte-level BPE tokenizer (the tokenizer of Stable Diffusion's text encoder): lower-cased,
// words split by CLIP's pattern, bytes spelled in GPT-2's byte alphabet, the last symbol of a word
// marked with "</w>", merges trained deterministically on a small prompt corpus, <|startoftext|> …
// <|endoftext|> around every text. Written either as Hugging Face's `tokenizer.json` (padded with
// <|endoftext|>) or as the files transformers' slow CLIPTokenizer saves (vocab.json, merges.txt,
// tokenizer_config.json, special_tokens_map.json), which is all that diffusers/Olive ONNX exports
// such as onnxruntime/sd-turbo ship: there SD 2.x's tokenizer pads with "!" (id 0).

import { bytesToUnicode } from "../gguf/bpe";

export const BOS = "<|startoftext|>";
export const EOS = "<|endoftext|>";
const EOW = "</w>";

const CLIP_SPLIT = String.raw`<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+`;

// Prompts of the kind image models are given; only there to give the merges realistic shapes.
const PROMPT_CORPUS = `
a photo of a cat sitting on a wooden table, soft morning light, high detail
a watercolor painting of a lighthouse on a rocky coast at sunset, dramatic clouds
portrait of an old fisherman with a grey beard, studio lighting, 85mm lens, sharp focus
a red sports car parked in a narrow street of an old european city, rain, reflections
an astronaut riding a horse on the moon, digital art, trending, highly detailed
a bowl of fresh fruit with apples, oranges and grapes, still life, oil painting
a futuristic city skyline at night with neon lights and flying cars, cinematic
a small cabin in a snowy forest, smoke from the chimney, warm light in the windows
a cute corgi puppy playing in the grass, shallow depth of field, photograph
a mountain lake with a reflection of the peaks, clear blue sky, landscape photography
an illustration of a dragon flying over a castle, fantasy, vibrant colors
a cup of coffee on a desk next to a laptop and a notebook, cozy, minimal
a field of sunflowers under a bright summer sky, wide angle, vivid colors
a black and white photo of a jazz musician playing the saxophone on stage
a robot reading a book in a library, warm tones, detailed, 3d render
`;

export interface ClipTokenizerFiles {
  "tokenizer.json": string;
  "tokenizer_config.json": string;
  "special_tokens_map.json": string;
}

export interface ClipVocab {
  vocab: Record<string, number>;
  merges: string[];
  bos: number;
  eos: number;
}

function words(text: string): string[] {
  const byteChars = bytesToUnicode();
  const enc = new TextEncoder();
  const norm = text.normalize("NFC").replace(/\s+/g, " ").toLowerCase();
  return (norm.match(new RegExp(CLIP_SPLIT, "gu")) ?? []).map((w) => [...enc.encode(w)].map((b) => byteChars[b]).join(""));
}

/** BPE training over words ending in "</w>"; ties go to the smallest pair, so the result is fixed. */
function trainMerges(corpus: string, maxMerges: number): string[] {
  const counts = new Map<string, number>();
  for (const w of words(corpus)) counts.set(w, (counts.get(w) ?? 0) + 1);
  const table = [...counts.entries()]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([w, count]) => {
      const symbols = [...w];
      symbols[symbols.length - 1] += EOW;
      return { symbols, count };
    });
  const merges: string[] = [];
  while (merges.length < maxMerges) {
    const pairs = new Map<string, number>();
    for (const { symbols, count } of table)
      for (let i = 0; i + 1 < symbols.length; i++) {
        const key = `${symbols[i]} ${symbols[i + 1]}`;
        pairs.set(key, (pairs.get(key) ?? 0) + count);
      }
    let best: string | undefined;
    let bestCount = 1;
    for (const [key, count] of pairs)
      if (count > bestCount || (count === bestCount && best !== undefined && key < best)) [best, bestCount] = [key, count];
    if (!best) break;
    merges.push(best);
    const [left, right] = best.split(" ") as [string, string];
    for (const entry of table) {
      const s = entry.symbols;
      const out: string[] = [];
      for (let i = 0; i < s.length; i++) {
        if (s[i] === left && s[i + 1] === right) out.push(left + right), i++;
        else out.push(s[i]!);
      }
      entry.symbols = out;
    }
  }
  return merges;
}

/**
 * The vocabulary: the 256 byte symbols, the same with "</w>", the merged symbols, then the two
 * special tokens. `order` "clip" lists the byte symbols as CLIP's encoder.json does (printable
 * bytes first, so "!" is id 0, the id SD 2.x pads with); "byte" by byte value.
 */
export function buildClipVocab(maxMerges: number, order: "byte" | "clip" = "byte"): ClipVocab {
  const byByte = bytesToUnicode();
  const base = order === "byte" ? byByte : [...byByte].sort((a, b) => a.codePointAt(0)! - b.codePointAt(0)!);
  const tokens = [...base, ...base.map((c) => c + EOW)];
  const merges = trainMerges(PROMPT_CORPUS, maxMerges);
  const seen = new Set(tokens);
  for (const m of merges) {
    const joined = m.replace(" ", "");
    if (!seen.has(joined)) seen.add(joined), tokens.push(joined);
  }
  const vocab: Record<string, number> = {};
  tokens.forEach((t, i) => (vocab[t] = i));
  const bos = tokens.length;
  const eos = bos + 1;
  vocab[BOS] = bos;
  vocab[EOS] = eos;
  return { vocab, merges, bos, eos };
}

/**
 * The three tokenizer files of a diffusers `tokenizer/` folder. `pad` "!" pads as SD 2.x does: "!"
 * becomes a special added token (transformers adds it from added_tokens_decoder), padding id 0.
 */
export function clipTokenizerFiles(v: ClipVocab, maxLength: number, pad: typeof EOS | "!" = EOS): ClipTokenizerFiles {
  const special = (id: number, content: string, normalized = true) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized, special: true });
  if (pad === "!" && v.vocab["!"] !== 0) throw new Error('padding with "!" needs the CLIP byte order ("!" is id 0)');
  const tokenizer = {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: [...(pad === "!" ? [special(0, "!", false)] : []), special(v.bos, BOS), special(v.eos, EOS)],
    normalizer: {
      type: "Sequence",
      normalizers: [{ type: "NFC" }, { type: "Replace", pattern: { Regex: "\\s+" }, content: " " }, { type: "Lowercase" }],
    },
    pre_tokenizer: {
      type: "Sequence",
      pretokenizers: [
        { type: "Split", pattern: { Regex: CLIP_SPLIT }, behavior: "Removed", invert: true },
        { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
      ],
    },
    post_processor: { type: "RobertaProcessing", sep: [EOS, v.eos], cls: [BOS, v.bos], trim_offsets: false, add_prefix_space: false },
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: "BPE",
      dropout: null,
      unk_token: EOS,
      continuing_subword_prefix: "",
      end_of_word_suffix: EOW,
      fuse_unk: false,
      byte_fallback: false,
      vocab: v.vocab,
      merges: v.merges,
    },
  };
  const config = {
    tokenizer_class: "CLIPTokenizer",
    model_max_length: maxLength,
    bos_token: BOS,
    eos_token: EOS,
    pad_token: pad,
    unk_token: EOS,
    do_lower_case: true,
    add_prefix_space: false,
    errors: "replace",
    clean_up_tokenization_spaces: true,
  };
  const map = { bos_token: BOS, eos_token: EOS, pad_token: pad, unk_token: EOS };
  return {
    "tokenizer.json": JSON.stringify(tokenizer),
    "tokenizer_config.json": JSON.stringify(config, null, 2),
    "special_tokens_map.json": JSON.stringify(map, null, 2),
  };
}

export interface ClipSlowTokenizerFiles {
  "vocab.json": string;
  "merges.txt": string;
  "tokenizer_config.json": string;
  "special_tokens_map.json": string;
}

/**
 * The tokenizer/ folder of onnxruntime/sd-turbo (Olive's export of SD-Turbo, an SD 2.1 distillate):
 * what transformers' CLIPTokenizer.save_pretrained writes, byte for byte in form (at that revision
 * tokenizer_config.json is 855 bytes and special_tokens_map.json 574, which these give with the real
 * ids): vocab.json and the two configs as json.dumps(indent=2, sort_keys=True), merges.txt with its
 * "#version: 0.2" header; padded with "!" (id 0). No tokenizer.json.
 */
export function clipSlowTokenizerFiles(v: ClipVocab, maxLength: number): ClipSlowTokenizerFiles {
  if (v.vocab["!"] !== 0) throw new Error('the SD 2.x tokenizer pads with "!", id 0: build the vocabulary in CLIP byte order');
  const token = (content: string, normalized: boolean) => ({ content, lstrip: false, normalized, rstrip: false, single_word: false });
  const config = {
    add_prefix_space: false,
    added_tokens_decoder: {
      "0": { ...token("!", false), special: true },
      [v.bos]: { ...token(BOS, true), special: true },
      [v.eos]: { ...token(EOS, true), special: true },
    },
    bos_token: BOS,
    clean_up_tokenization_spaces: true,
    do_lower_case: true,
    eos_token: EOS,
    errors: "replace",
    model_max_length: maxLength,
    pad_token: "!",
    tokenizer_class: "CLIPTokenizer",
    unk_token: EOS,
  };
  const map = { bos_token: token(BOS, true), eos_token: token(EOS, true), pad_token: token("!", false), unk_token: token(EOS, true) };
  return {
    "vocab.json": pythonJson(v.vocab),
    "merges.txt": ["#version: 0.2", ...v.merges].join("\n") + "\n",
    "tokenizer_config.json": pythonJson(config),
    "special_tokens_map.json": pythonJson(map),
  };
}

/**
 * Python's json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n" for plain data
 * (strings, integers, booleans, null, lists, objects): keys sorted by code point, which a JS object
 * cannot keep ("0" and other integer-like keys would come first).
 */
export function pythonJson(value: unknown): string {
  const byCodePoint = (a: string, b: string) => {
    const [x, y] = [[...a], [...b]];
    for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i]!.codePointAt(0)! - y[i]!.codePointAt(0)!;
    return x.length - y.length;
  };
  const write = (v: unknown, indent: string): string => {
    if (v === null || typeof v !== "object") return JSON.stringify(v);
    const inner = indent + "  ";
    if (Array.isArray(v)) return v.length ? `[\n${v.map((x) => inner + write(x, inner)).join(",\n")}\n${indent}]` : "[]";
    const keys = Object.keys(v).sort(byCodePoint);
    return keys.length ? `{\n${keys.map((k) => `${inner}${JSON.stringify(k)}: ${write((v as Record<string, unknown>)[k], inner)}`).join(",\n")}\n${indent}}` : "{}";
  };
  return write(value, "") + "\n";
}
