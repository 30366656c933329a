import { acquireLock } from "lifecycle-utils";
import type { LlamaContext, LlamaContextSequence, LlamaModel, Token } from "node-llama-cpp";
import type { DecodedImage } from "../../../chat/job";
import { llamaAddon } from "../native/addon-path";
import { locateRuns, reusablePrefix, type HeldImage, type ImageRun } from "./prompt";

// A chat model's projector (mmproj) loaded through llama.cpp's multimodal library, and the one
// place that writes image embeddings into node-llama-cpp's sequences. It reaches node-llama-cpp
// 3.22.1 internals (the native model/context objects, a sequence's token list, its evaluation
// and context locks — the same locks node-llama-cpp's own loadStateFromFile takes), so the rest
// of the engine (LlamaChat, prefix reuse, slots, grammars, tools, thinking) stays as it is.

interface NativeSpan {
  readonly nTokens: number;
  readonly nPos: number;
}
interface NativeProjector {
  /** `backend`: the ggml backend clip computes on ("Vulkan0", "CUDA0", "CPU"), "" if clip did not say. */
  info(): { vision: boolean; audio: boolean; mrope: boolean; nEmbd: number; marker: string; backend: string };
  tokenize(rgb: Uint8Array, width: number, height: number, id: string): Promise<NativeSpan>;
  encode(span: NativeSpan): Promise<void>;
  decode(context: unknown, span: NativeSpan, nPast: number, seqId: number, nBatch: number): Promise<number>;
  dispose(): void;
}
interface Addon {
  loadProjector(model: unknown, path: string, options: { useGpu: boolean; threads: number }): Promise<NativeProjector>;
}

/** node-llama-cpp internals this module relies on (checked once at load). */
type SequenceInternals = {
  _lock: object;
  _context: LlamaContext & { _ctx: unknown };
  _contextTokens: Token[];
  _nextTokenIndex: number;
  _sequenceId: number;
  _loadedTokenPredictions: unknown[];
  _tokenMeter: { useTokens(n: number, type: "input" | "output"): void };
  needsCheckpoints: boolean;
};

function loadAddon(): Addon {
  const addon = llamaAddon<Addon>();
  if (!addon)
    throw new Error("image input needs the llama addon, which is not built: run ./install.sh (or `bun src/engines/llama/native/build.ts`); it needs cmake and a C++ compiler");
  return addon;
}

/** Special-token text that becomes one placeholder token, tried in order (real vocabularies have one of the first). */
const PLACEHOLDERS = ["<|image_pad|>", "<image_soft_token>", "<|image|>", "<image>", "<|vision_pad|>", "<|endoftext|>"];

export interface ImageSpan {
  span: NativeSpan;
  hash: string;
  /** Tokens the image takes in the prompt (its chunks: markers around it included). */
  tokens: number;
}

export class Projector {
  /** Spans by image hash: the same image is preprocessed and encoded once. */
  private readonly spans = new Map<string, Promise<ImageSpan>>();
  private readonly encoded = new WeakSet<NativeSpan>();
  /** The vision tower runs one image at a time. */
  private encoding: Promise<unknown> = Promise.resolve();
  /** What each sequence holds at image positions. */
  private readonly held = new WeakMap<LlamaContextSequence, HeldImage[]>();

  private constructor(
    private readonly native: NativeProjector,
    readonly placeholderText: string,
    readonly placeholder: Token,
    private readonly batchSize: number,
    /** The ggml backend the vision tower runs on, as clip named it ("Vulkan0", "CUDA0", "CPU"; "" unknown). */
    readonly backend: string,
  ) {}

  /** The device the vision tower runs on, from its backend's name; null when clip did not say. */
  get device(): "cpu" | "cuda" | "vulkan" | null {
    if (/^vulkan/i.test(this.backend)) return "vulkan";
    if (/^cuda/i.test(this.backend)) return "cuda";
    if (/^cpu/i.test(this.backend)) return "cpu";
    return null;
  }

  /** `probe`: one of the context's sequences, to check the internals this module relies on. */
  static async load(model: LlamaModel, context: LlamaContext, path: string, o: { useGpu: boolean; threads: number }, probe: LlamaContextSequence): Promise<Projector> {
    const native = await loadAddon().loadProjector((model as unknown as { _model: unknown })._model, path, o);
    const info = native.info();
    const fail = (why: string): never => {
      native.dispose();
      throw new Error(`projector ${path}: ${why}`);
    };
    if (!info.vision) fail("it has no vision encoder (an audio-only projector?)");
    if (info.mrope) fail("its model family places image tokens with M-RoPE (Qwen2/2.5/3-VL style), which this server does not support yet");
    const seq = probe as unknown as SequenceInternals;
    for (const k of ["_lock", "_context", "_contextTokens", "_nextTokenIndex", "_sequenceId", "_loadedTokenPredictions", "_tokenMeter"] as const)
      if (seq[k] === undefined) fail(`this node-llama-cpp lacks the sequence internal "${k}" image input relies on`);
    const placeholderText = PLACEHOLDERS.find((p) => model.tokenize(p, true).length === 1);
    if (!placeholderText) fail("the model's vocabulary has no single-token placeholder for image positions");
    return new Projector(native, placeholderText!, model.tokenize(placeholderText!, true)[0]!, context.batchSize, info.backend ?? "");
  }

  dispose() {
    this.native.dispose();
  }

  /** The image's span (its token count known before any encoding). */
  span(image: DecodedImage): Promise<ImageSpan> {
    let s = this.spans.get(image.hash);
    if (!s) {
      s = this.native.tokenize(image.rgb, image.width, image.height, image.hash).then((span) => ({ span, hash: image.hash, tokens: span.nTokens }));
      s.catch(() => this.spans.delete(image.hash));
      this.spans.set(image.hash, s);
      while (this.spans.size > 32) this.spans.delete(this.spans.keys().next().value!);
    }
    return s;
  }

  private encode(span: NativeSpan): Promise<void> {
    if (this.encoded.has(span)) return Promise.resolve();
    const run = this.encoding.then(() => (this.encoded.has(span) ? undefined : this.native.encode(span).then(() => void this.encoded.add(span))));
    this.encoding = run.catch(() => {});
    return run;
  }

  runs(tokens: readonly number[], images: ImageSpan[]): ImageRun[] {
    return locateRuns(tokens, this.placeholder, images.map((i) => i.tokens));
  }

  /** Prompt tokens a sequence can keep for this prompt (images compared by content, not by placeholder). */
  reusable(sequence: LlamaContextSequence, tokens: readonly number[], runs: ImageRun[], images: ImageSpan[]): number {
    const common = sequence.compareContextTokens(tokens as Token[]).firstDifferentIndex;
    return reusablePrefix(common, runs, images.map((i) => i.hash), this.held.get(sequence) ?? []);
  }

  /**
   * Brings `sequence` up to the end of the prompt's last image: keeps what it can, evaluates the
   * text between images through node-llama-cpp, and decodes each image's embeddings at its
   * positions. LlamaChat then finds all of it in the sequence and evaluates only the rest.
   */
  async prime(sequence: LlamaContextSequence, tokens: readonly number[], images: ImageSpan[], runs: ImageRun[]): Promise<void> {
    await Promise.all(images.map((i) => this.encode(i.span)));
    const seq = sequence as unknown as SequenceInternals;
    let reuse = this.reusable(sequence, tokens, runs, images);
    if (reuse < sequence.nextTokenIndex) {
      // Models that restore checkpoints re-evaluate tokens after an erase, which placeholders cannot be.
      if (seq.needsCheckpoints && (this.held.get(sequence)?.length ?? 0) > 0) {
        await sequence.clearHistory();
        reuse = 0;
      } else await sequence.eraseContextTokenRanges([{ start: reuse, end: sequence.nextTokenIndex }]);
    }
    const held = (this.held.get(sequence) ?? []).filter((h) => h.start + h.length <= reuse);
    this.held.set(sequence, held);
    let at = reuse;
    for (const r of runs) {
      if (r.start + r.length <= reuse) continue;
      if (at < r.start) await sequence.evaluateWithoutGeneratingNewTokens(tokens.slice(at, r.start) as Token[]);
      await this.decodeInto(seq, images[r.image]!.span, tokens.slice(r.start, r.start + r.length) as Token[]);
      held.push({ start: r.start, length: r.length, hash: images[r.image]!.hash });
      at = r.start + r.length;
    }
  }

  /** One image's embeddings into the sequence, under the locks node-llama-cpp's own evaluation takes. */
  private async decodeInto(seq: SequenceInternals, span: NativeSpan, placeholders: Token[]) {
    const evaluation = await acquireLock([seq._lock, "evaluate"]);
    const context = await acquireLock([seq._context, "context"]);
    try {
      if (seq._loadedTokenPredictions.length > 0) throw new Error("image input cannot follow speculative token predictions");
      const start = seq._nextTokenIndex;
      const next = await this.native.decode(seq._context._ctx, span, start, seq._sequenceId, this.batchSize);
      if (next !== start + placeholders.length) throw new Error(`the image took ${next - start} positions where ${placeholders.length} were expected`);
      seq._contextTokens.push(...placeholders);
      seq._nextTokenIndex = next;
      seq._tokenMeter.useTokens(placeholders.length, "input");
    } finally {
      context.dispose();
      evaluation.dispose();
    }
  }
}
