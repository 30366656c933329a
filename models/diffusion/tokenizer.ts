// A CLIP-style byte-level BPE tokenizer (the tokenizer of Stable Diffusion's text encoder) in the
// Hugging Face `tokenizer.json` format: lower-cased, words split by CLIP's pattern, bytes spelled in
// GPT-2's byte alphabet, the last symbol of a word marked with "</w>", merges trained deterministically
// on a small prompt corpus, <|startoftext|> … <|endoftext|> around every text, padded with <|endoftext|>.

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

export function buildClipVocab(maxMerges: number): ClipVocab {
  const base = bytesToUnicode();
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

/** The three tokenizer files of a diffusers `tokenizer/` folder. */
export function clipTokenizerFiles(v: ClipVocab, maxLength: number): ClipTokenizerFiles {
  const special = (id: number, content: string) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: true, special: true });
  const tokenizer = {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: [special(v.bos, BOS), special(v.eos, EOS)],
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
    pad_token: EOS,
    unk_token: EOS,
    do_lower_case: true,
    add_prefix_space: false,
    errors: "replace",
    clean_up_tokenization_spaces: true,
  };
  const map = { bos_token: BOS, eos_token: EOS, pad_token: EOS, unk_token: EOS };
  return {
    "tokenizer.json": JSON.stringify(tokenizer),
    "tokenizer_config.json": JSON.stringify(config, null, 2),
    "special_tokens_map.json": JSON.stringify(map, null, 2),
  };
}
