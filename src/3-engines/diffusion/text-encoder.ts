import "../onnx-telemetry"; // before ONNX Runtime starts: no telemetry, no mat-debug log
import * as transformers from "@huggingface/transformers";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import * as ort from "onnxruntime-node";
import type { OnnxBackend } from "../onnx-device";
import { inputMeta, toFloat32, toTensor, type InputMeta } from "./tensors";

// The prompt → embeddings half of the pipeline: the export's own tokenizer (transformers.js, from
// tokenizer/tokenizer.json, or built from CLIP's vocab.json + merges.txt where an export ships only
// those), padded to its max length and truncated there as diffusers does for CLIP, then the text
// encoder (text_encoder/model.onnx) as an ONNX Runtime session on the chosen device, whatever model
// it is (CLIPTextModel, T5EncoderModel, …): it is fed the inputs its graph declares, in the element
// types it declares (int64 from optimum, int32 from Olive), and its outputs are read as float32
// whatever it returns (fp16 exports). Files are read locally only.

export interface PromptEmbedding {
  hidden: Float32Array;
  /** [1, sequence, dim] */
  hiddenDims: number[];
  /** The pooled embedding [1, dim] where the encoder has one (pooler_output or text_embeds). */
  pooled: { data: Float32Array; dims: number[] } | null;
}

export interface TextEncoderOptions {
  device: OnnxBackend;
  threads: number;
}

export class PromptEncoder {
  private constructor(
    private readonly tokenizer: transformers.PreTrainedTokenizer,
    private readonly session: ort.InferenceSession,
    private readonly inputs: Record<string, InputMeta>,
    readonly maxTokens: number,
  ) {}

  static async load(tokenizerDir: string, textEncoderDir: string, opts: TextEncoderOptions): Promise<PromptEncoder> {
    const tokenizer = await loadTokenizer(tokenizerDir);
    const session = await ort.InferenceSession.create(join(textEncoderDir, "model.onnx"), {
      executionProviders: [opts.device],
      intraOpNumThreads: opts.threads,
      interOpNumThreads: 1,
      graphOptimizationLevel: "all",
    });
    const unknown = session.inputNames.filter((n) => !["input_ids", "attention_mask"].includes(n));
    if (unknown.length || !session.inputNames.includes("input_ids")) {
      await session.release();
      throw new Error(`text_encoder/model.onnx must take input_ids (and optionally attention_mask); it takes ${session.inputNames.join(", ")}`);
    }
    const inputs = Object.fromEntries(session.inputNames.map((n) => [n, inputMeta(session, n)]));
    // The window: the tokenizer's model_max_length, the encoder's position table where its config
    // says, a fixed sequence length where the graph declares one.
    const configPath = join(textEncoderDir, "config.json");
    const config = existsSync(configPath) ? (JSON.parse(readFileSync(configPath, "utf8")) as { max_position_embeddings?: number }) : {};
    const seq = session.inputMetadata[session.inputNames.indexOf("input_ids")];
    const fixed = seq?.isTensor && typeof seq.shape[1] === "number" && seq.shape[1] > 0 ? seq.shape[1] : Infinity;
    const limit = Math.min(tokenizer.model_max_length, config.max_position_embeddings ?? Infinity, fixed);
    return new PromptEncoder(tokenizer, session, inputs, Number.isFinite(limit) && limit <= 4096 ? limit : 77);
  }

  async encode(prompt: string): Promise<PromptEmbedding> {
    const { ids, length } = encodePrompt(this.tokenizer, prompt, this.maxTokens);
    const dims = [1, ids.length];
    const feeds: Record<string, ort.Tensor> = { input_ids: toTensor(this.inputs.input_ids!, Float32Array.from(ids), dims) };
    if (this.inputs.attention_mask) feeds.attention_mask = toTensor(this.inputs.attention_mask, Float32Array.from(ids, (_, i) => (i < length ? 1 : 0)), dims);
    const out = await this.session.run(feeds);
    const hidden = out.last_hidden_state ?? out[this.session.outputNames[0]!];
    if (!hidden) throw new Error("the text encoder returned no last_hidden_state");
    const pooled = out.pooler_output ?? out.text_embeds ?? null;
    return {
      hidden: toFloat32(hidden),
      hiddenDims: [...hidden.dims],
      pooled: pooled ? { data: toFloat32(pooled), dims: [...pooled.dims] } : null,
    };
  }

  async dispose(): Promise<void> {
    await this.session.release();
  }
}

/**
 * A prompt's ids as diffusers gets them from CLIP's tokenizer (padding "max_length", truncation,
 * max_length = the window): cut to the window with the special tokens kept, so a long prompt ends
 * [<bos>, first window−2 tokens, <eos>] (transformers.js cuts after adding them and would drop
 * <eos>), then padded with the pad token. `length` counts the ids before padding.
 */
export function encodePrompt(tokenizer: transformers.PreTrainedTokenizer, prompt: string, maxLength: number): { ids: number[]; length: number } {
  let ids = tokenizer.encode(prompt);
  if (ids.length > maxLength) {
    const plain = tokenizer.encode(prompt, { add_special_tokens: false });
    const before = ids.findIndex((_, i) => plain.every((t, j) => ids[i + j] === t));
    if (before < 0) throw new Error("the tokenizer's special tokens could not be told from the prompt's");
    const after = ids.length - before - plain.length;
    ids = [...ids.slice(0, before), ...plain.slice(0, Math.max(0, maxLength - before - after)), ...ids.slice(before + plain.length)];
  }
  const length = ids.length;
  const pad = tokenizer.pad_token_id ?? tokenizer.eos_token_id;
  if (pad === undefined || pad === null) throw new Error("the tokenizer names no pad or end-of-text token");
  while (ids.length < maxLength) ids.push(pad);
  return { ids, length };
}

/** The tokenizer in `dir`: its tokenizer.json, else CLIP's vocab.json + merges.txt (clipTokenizerJson). */
export async function loadTokenizer(dir: string): Promise<transformers.PreTrainedTokenizer> {
  transformers.env.allowRemoteModels = false;
  if (existsSync(join(dir, "tokenizer.json"))) return transformers.AutoTokenizer.from_pretrained(dir, { local_files_only: true });
  const read = (name: string) => (existsSync(join(dir, name)) ? readFileSync(join(dir, name), "utf8") : null);
  const [vocab, merges] = [read("vocab.json"), read("merges.txt")];
  if (vocab === null || merges === null) throw new Error(`${dir}: neither tokenizer.json nor vocab.json + merges.txt is there`);
  const config = JSON.parse(read("tokenizer_config.json") ?? "{}") as TokenizerConfig;
  const map = JSON.parse(read("special_tokens_map.json") ?? "{}") as Record<string, unknown>;
  const klass = config.tokenizer_class ?? "CLIPTokenizer";
  if (klass !== "CLIPTokenizer" && klass !== "CLIPTokenizerFast") throw new Error(`${dir}: vocab.json + merges.txt of a ${klass} (only CLIP's are read; a tokenizer.json is needed)`);
  const json = clipTokenizerJson(JSON.parse(vocab) as Record<string, number>, merges, config, map);
  const names = ["bos_token", "eos_token", "unk_token", "pad_token"] as const;
  const filled: TokenizerConfig = { ...config };
  for (const k of names) filled[k] = tokenContent(config[k] ?? map[k]) ?? CLIP_SPECIALS[k];
  filled.model_max_length ??= 77;
  return new transformers.CLIPTokenizer(json, filled);
}

type TokenizerConfig = {
  tokenizer_class?: string;
  model_max_length?: number;
  bos_token?: unknown;
  eos_token?: unknown;
  unk_token?: unknown;
  pad_token?: unknown;
  added_tokens_decoder?: Record<string, AddedToken>;
  [key: string]: unknown;
};
type AddedToken = { content: string; single_word?: boolean; lstrip?: boolean; rstrip?: boolean; normalized?: boolean; special?: boolean };

const CLIP_SPECIALS = { bos_token: "<|startoftext|>", eos_token: "<|endoftext|>", unk_token: "<|endoftext|>", pad_token: "<|endoftext|>" };

/** A special token as a config names it: a string, or an AddedToken object ({content, …}, with or without __type). */
function tokenContent(v: unknown): string | undefined {
  if (typeof v === "string") return v;
  if (v && typeof v === "object" && typeof (v as AddedToken).content === "string") return (v as AddedToken).content;
  return undefined;
}

/**
 * The tokenizer.json that transformers writes for a CLIP tokenizer saved as vocab.json + merges.txt
 * (CLIPTokenizerFast from the slow files: convert_slow_tokenizer.py's CLIPConverter, then the
 * tokenizer's added tokens): BPE with "</w>" ending each word, NFC + whitespace runs to one space +
 * lower case, CLIP's split pattern then GPT-2's byte alphabet, <bos> … <eos> around the text
 * (RobertaProcessing), and the added tokens of tokenizer_config.json's added_tokens_decoder — which
 * for SD 2.x includes the pad token "!" (id 0), so "!" in a prompt is that token, as in transformers.
 * merges.txt is read as the slow CLIPTokenizer reads it: the first line (the "#version" header) is
 * skipped, at most 49152 − 256 − 2 merges are kept.
 */
export function clipTokenizerJson(vocab: Record<string, number>, mergesText: string, config: TokenizerConfig, specialMap: Record<string, unknown> = {}): object {
  const merges = mergesText
    .trim()
    .split("\n")
    .slice(1, 49152 - 256 - 2 + 1)
    .map((line) => line.trim().split(/\s+/).join(" "))
    .filter((m) => m.length > 0);
  const special = (k: keyof typeof CLIP_SPECIALS) => tokenContent(config[k] ?? specialMap[k]) ?? CLIP_SPECIALS[k];
  const id = (token: string) => {
    const i = vocab[token];
    if (i === undefined) throw new Error(`vocab.json has no ${JSON.stringify(token)}`);
    return i;
  };
  const added = new Map<number, Required<AddedToken> & { id: number }>();
  const add = (i: number, t: AddedToken) =>
    added.set(i, { id: i, content: t.content, single_word: t.single_word ?? false, lstrip: t.lstrip ?? false, rstrip: t.rstrip ?? false, normalized: t.normalized ?? true, special: t.special ?? true });
  for (const [key, t] of Object.entries(config.added_tokens_decoder ?? {})) add(Number(key), t);
  // Older configs (SD 1.x) list no added_tokens_decoder: transformers adds the special tokens.
  for (const k of ["bos_token", "eos_token", "unk_token", "pad_token"] as const) {
    const content = special(k);
    const i = id(content);
    if (![...added.values()].some((t) => t.content === content)) {
      const given = config[k] ?? specialMap[k];
      add(i, { content, normalized: typeof given === "object" && given !== null ? ((given as AddedToken).normalized ?? true) : true });
    }
  }
  const [bos, eos] = [special("bos_token"), special("eos_token")];
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: [...added.values()].sort((a, b) => a.id - b.id),
    normalizer: {
      type: "Sequence",
      normalizers: [{ type: "NFC" }, { type: "Replace", pattern: { Regex: "\\s+" }, content: " " }, { type: "Lowercase" }],
    },
    pre_tokenizer: {
      type: "Sequence",
      pretokenizers: [
        { type: "Split", pattern: { Regex: "'s|'t|'re|'ve|'m|'ll|'d|[\\p{L}]+|[\\p{N}]|[^\\s\\p{L}\\p{N}]+" }, behavior: "Removed", invert: true },
        { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
      ],
    },
    post_processor: { type: "RobertaProcessing", sep: [eos, id(eos)], cls: [bos, id(bos)], trim_offsets: false, add_prefix_space: false },
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: "BPE",
      dropout: null,
      unk_token: special("unk_token"),
      continuing_subword_prefix: "",
      end_of_word_suffix: "</w>",
      fuse_unk: false,
      byte_fallback: false,
      vocab,
      merges,
    },
  };
}
