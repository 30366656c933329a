import type { LlamaContext, LlamaModel, Token } from "node-llama-cpp";
import type { DecodedImage } from "../../chat-job";
import type { DecodeLoop, LoopSlot } from "../decode-loop";
import { llamaAddon } from "../native/addon-path";
import { nativeModel } from "../native/handles";
import { locateRuns, reusablePrefix, type HeldImage, type ImageRun } from "./prompt";

// A chat model's projector (mmproj) loaded through llama.cpp's multimodal library, and the one
// place that writes image embeddings into a slot's cache: through the context's decode loop
// (decode-loop.ts), whose thread owns the context and decodes the image's chunks between two of its
// steps. A slot's cache record holds a placeholder token at each image position; which image is
// there is kept here, so a prompt's reusable prefix compares images by content.

interface NativeSpan {
  readonly nTokens: number;
  readonly nPos: number;
}
interface NativeProjector {
  /** `backend`: the ggml backend clip computes on ("Vulkan0", "CUDA0", "CPU"), "" if clip did not say. */
  info(): { vision: boolean; audio: boolean; mrope: boolean; nEmbd: number; marker: string; backend: string };
  tokenize(rgb: Uint8Array, width: number, height: number, id: string): Promise<NativeSpan>;
  encode(span: NativeSpan): Promise<void>;
  decode(loop: unknown, span: NativeSpan, nPast: number, seqId: number, nBatch: number): Promise<number>;
  dispose(): void;
}
interface Addon {
  loadProjector(model: unknown, path: string, options: { useGpu: boolean; threads: number }): Promise<NativeProjector>;
}

function loadAddon(): Addon {
  const addon = llamaAddon<Addon>();
  if (!addon)
    throw new Error("image input needs the llama addon, which is not built: run ./install.sh (or `bun src/3-engines/llama/native/build.ts`); it needs cmake and a C++ compiler");
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
  /** What each slot holds at image positions. */
  private readonly held = new WeakMap<LoopSlot, HeldImage[]>();

  private constructor(
    private readonly native: NativeProjector,
    private readonly loop: DecodeLoop,
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

  static async load(model: LlamaModel, context: LlamaContext, loop: DecodeLoop, path: string, o: { useGpu: boolean; threads: number }): Promise<Projector> {
    const native = await loadAddon().loadProjector(nativeModel(model), path, o);
    const info = native.info();
    const fail = (why: string): never => {
      native.dispose();
      throw new Error(`projector ${path}: ${why}`);
    };
    if (!info.vision) fail("it has no vision encoder (an audio-only projector?)");
    if (info.mrope) fail("its model family places image tokens with M-RoPE (Qwen2/2.5/3-VL style), which this server does not support yet");
    const placeholderText = PLACEHOLDERS.find((p) => model.tokenize(p, true).length === 1);
    if (!placeholderText) fail("the model's vocabulary has no single-token placeholder for image positions");
    return new Projector(native, loop, placeholderText!, model.tokenize(placeholderText!, true)[0]!, context.batchSize, info.backend ?? "");
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

  /** Prompt tokens a slot can keep for this prompt (images compared by content, not by placeholder). */
  reusable(slot: LoopSlot, tokens: readonly number[], runs: ImageRun[], images: ImageSpan[]): number {
    return reusablePrefix(slot.commonPrefix(tokens), runs, images.map((i) => i.hash), this.held.get(slot) ?? []);
  }

  /**
   * Brings `slot`'s cache up to the end of the prompt's last image: keeps what it can, decodes the
   * text between images and each image's embeddings at its positions. Returns the prompt tokens the
   * cache then holds; the generation decodes only the rest.
   */
  async prime(slot: LoopSlot, loop: DecodeLoop, tokens: readonly number[], images: ImageSpan[], runs: ImageRun[], batch: boolean): Promise<number> {
    await Promise.all(images.map((i) => this.encode(i.span)));
    const reuse = this.reusable(slot, tokens, runs, images);
    loop.trim(slot, reuse);
    const held = (this.held.get(slot) ?? []).filter((h) => h.start + h.length <= reuse);
    this.held.set(slot, held);
    let at = reuse;
    for (const r of runs) {
      if (r.start + r.length <= reuse) continue;
      if (at < r.start) await loop.prefill(slot, tokens.slice(at, r.start), at, batch);
      await slot.busy;
      loop.trim(slot, r.start);
      const next = await this.native.decode(this.loop.handle, images[r.image]!.span, r.start, slot.seq, this.batchSize);
      if (next !== r.start + r.length) {
        slot.cached.length = 0; // the cache no longer matches the record: decoded again from scratch next time
        throw new Error(`the image took ${next - r.start} positions where ${r.length} were expected`);
      }
      slot.cached.push(...(tokens.slice(r.start, r.start + r.length) as number[]));
      held.push({ start: r.start, length: r.length, hash: images[r.image]!.hash });
      at = r.start + r.length;
    }
    return at;
  }
}
