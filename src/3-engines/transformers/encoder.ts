import type { Logger } from "../../lib/log";
import type { Head, RunMessage, WorkerReply, WorkerRequest } from "./encoder-worker";
import type { BatchLimits } from "./micro-batcher";
import type { Dtype } from "./model-folder";
import { workerUrl } from "../worker-url";
import { requireOnnxDevice, type OnnxBackend } from "../onnx-device";
import { transformersRuntime } from "./runtime";

// One encoder model: its tokenizer on the main thread (requests are counted and checked before
// any credit is reserved) and its ONNX session in a worker thread (encoder-worker.ts), so a run
// never blocks the server. Loaded once (concurrent callers share the load), unloaded on request;
// a worker that dies fails its runs and is replaced on the next use.

export interface EncoderOptions {
  modelId: string;
  /** The model folder, HF layout (manifest files.model). */
  folder: string;
  device: OnnxBackend;
  threads: number;
  /** The manifest's max_context: the engine serves min(this, the folder's own limit). */
  maxContext?: number;
  batch?: BatchLimits;
  /** Padded tokens per model call: each batch is length-sorted and split into calls this big. */
  callTokens: number;
  logger: Logger;
}

/** A tokenized sequence; `types` are token_type_ids (zeros when absent). */
export interface Sequence {
  ids: number[];
  types?: number[];
}

type Transformers = Awaited<ReturnType<typeof transformersRuntime>>;
export type Tokenizer = Awaited<ReturnType<Transformers["AutoTokenizer"]["from_pretrained"]>>;

export interface Loaded {
  tokenizer: Tokenizer;
  device: OnnxBackend;
}

/**
 * `items.map(fn)` that gives the event loop a turn every `sliceMs`: tokenizing runs on the main
 * thread (counts are needed before credit is reserved), and a request of 2,048 long inputs must
 * not stall every other request while it is tokenized.
 */
export async function mapInSlices<T, R>(items: readonly T[], fn: (item: T, index: number) => R, sliceMs = 10, stopAfter?: (r: R) => boolean): Promise<R[]> {
  const out: R[] = [];
  let sliceStart = performance.now();
  for (let i = 0; i < items.length; i++) {
    out.push(fn(items[i]!, i));
    if (stopAfter?.(out[i]!)) break;
    if (performance.now() - sliceStart > sliceMs && i + 1 < items.length) {
      await new Promise((r) => setImmediate(r));
      sliceStart = performance.now();
    }
  }
  return out;
}

interface Waiter {
  resolve(r: { width: number; data: Float32Array | Float64Array; calls: number }): void;
  reject(e: Error): void;
}

export class Encoder {
  private state: Loaded | null = null;
  private loading: Promise<Loaded> | null = null;
  private worker: Worker | null = null;
  private waiters = new Map<number, Waiter>();
  private onLoad: { resolve(r: { device: OnnxBackend; fallback?: string }): void; reject(e: Error): void } | null = null;
  private onUnload: (() => void) | null = null;
  private nextId = 1;
  private idleTimer: ReturnType<typeof setTimeout> | null = null;
  /** Calls of the ONNX session so far (a batch may take several: see callTokens). */
  calls = 0;

  constructor(
    private readonly opts: EncoderOptions,
    private readonly task: "embedding" | "classifier" | "reranker",
    /** Read at load: the weights' dtype, the head the worker applies, and what the load log line adds. */
    private readonly setup: () => { dtype: Dtype; head: Head; describe: Record<string, unknown> },
  ) {}

  get loaded(): boolean {
    return this.state !== null;
  }
  /** The device the session really runs on (CPU after a CUDA fallback; WebGPU never falls back). */
  get device(): OnnxBackend | undefined {
    return this.state?.device;
  }

  ensure(): Promise<Loaded> {
    if (this.state) return Promise.resolve(this.state);
    this.loading ??= this.doLoad().finally(() => (this.loading = null));
    return this.loading;
  }

  private async doLoad(): Promise<Loaded> {
    const o = this.opts;
    const started = performance.now();
    // Asked for WebGPU: no adapter fails the load with the reason (never a quiet CPU model).
    await requireOnnxDevice(o.device, `${this.task} model`, o.modelId, o.logger);
    const { dtype, head, describe } = this.setup();
    const t = await transformersRuntime();
    const tokenizer = await t.AutoTokenizer.from_pretrained(o.folder, { local_files_only: true });
    const worker = this.start();
    const { device, fallback } = await new Promise<{ device: OnnxBackend; fallback?: string }>((resolve, reject) => {
      this.onLoad = { resolve, reject };
      this.post({ type: "load", folder: o.folder, device: o.device, threads: o.threads, dtype, padId: tokenizer.pad_token_id ?? 0, head });
    }).catch((e) => {
      this.stop(worker);
      throw e;
    });
    this.keepAlive(false);
    if (fallback) o.logger.warn("onnx device: CUDA session failed; using CPU", { model: o.modelId, error: fallback });
    this.state = { tokenizer, device };
    o.logger.info(`${this.task} model loaded`, {
      model: o.modelId,
      device,
      threads: o.threads,
      dtype,
      call_tokens: o.callTokens,
      ...describe,
      load_ms: Math.round(performance.now() - started),
    });
    return this.state;
  }

  async unload(): Promise<void> {
    if (this.loading) await this.loading.catch(() => {});
    const worker = this.worker;
    const wasLoaded = this.state !== null;
    this.state = null;
    if (!worker) return;
    // The worker disposes of its session first, after the run in hand. It is never ended before it
    // answers: ending a worker inside a native ONNX call aborts the whole process (Bun 1.4.5, measured).
    const done = new Promise<void>((r) => (this.onUnload = r));
    this.post({ type: "unload" });
    const slow = setTimeout(() => this.opts.logger.warn(`waiting for the ${this.task} worker to finish its run before unloading`, { model: this.opts.modelId }), 2000);
    slow.unref();
    await done;
    clearTimeout(slow);
    this.stop(worker);
    if (wasLoaded) this.opts.logger.info(`${this.task} model unloaded`, { model: this.opts.modelId });
  }

  /** One batch: `width` values per sequence (a vector, the three probabilities, or one relevance), in order. */
  async forward(seqs: Sequence[]): Promise<{ width: number; data: Float32Array | Float64Array }> {
    await this.ensure();
    const lengths = Int32Array.from(seqs, (s) => s.ids.length);
    const ids = new Int32Array(lengths.reduce((a, b) => a + b, 0));
    const anyTypes = seqs.some((s) => s.types);
    const types = anyTypes ? new Uint8Array(ids.length) : null;
    let at = 0;
    for (const s of seqs) {
      ids.set(s.ids, at);
      if (s.types) types!.set(s.types, at);
      at += s.ids.length;
    }
    const id = this.nextId++;
    const run: RunMessage = { type: "run", id, ids, lengths, types, callTokens: this.opts.callTokens };
    this.keepAlive(true);
    try {
      const result = await new Promise<{ width: number; data: Float32Array | Float64Array; calls: number }>((resolve, reject) => {
        this.waiters.set(id, { resolve, reject });
        this.post(run, [ids.buffer, lengths.buffer, ...(types ? [types.buffer] : [])]);
      });
      this.calls += result.calls;
      return result;
    } finally {
      if (!this.waiters.size) this.keepAlive(false);
    }
  }

  private start(): Worker {
    const worker = new Worker(workerUrl("src/3-engines/transformers/encoder-worker.ts", new URL("./encoder-worker.ts", import.meta.url)));
    worker.onmessage = (e: MessageEvent<WorkerReply>) => this.receive(e.data);
    worker.onerror = (e) => this.lost(worker, e.message);
    // A worker that ends without being asked (killed, out of memory) must not leave runs waiting.
    worker.addEventListener("close", () => this.lost(worker, "the worker exited"));
    this.worker = worker;
    return worker;
  }

  /**
   * An idle model must not keep the process alive (tests, CLI), but Bun runs an unref'd worker about
   * half as fast (measured), so the worker is ref'd while it loads or runs and unref'd once it has
   * been idle for a second.
   */
  private keepAlive(on: boolean) {
    const w = this.worker as (Worker & { ref(): void; unref(): void }) | null;
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = null;
    if (on) return w?.ref();
    this.idleTimer = setTimeout(() => w?.unref(), 1000);
    this.idleTimer.unref();
  }

  /** The worker failed or ended on its own: fail what waits on it; the next use starts a new one. */
  private lost(worker: Worker, reason: string) {
    if (this.worker !== worker) return;
    this.opts.logger.error(`${this.task} worker failed`, { model: this.opts.modelId, error: reason });
    this.state = null;
    this.worker = null;
    worker.terminate();
    this.onUnload?.();
    this.onUnload = null;
    this.fail(new Error(`${this.task} worker for ${this.opts.modelId} failed: ${reason}`));
  }

  private stop(worker: Worker) {
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = null;
    worker.terminate();
    if (this.worker === worker) this.worker = null;
    this.fail(new Error(`model ${this.opts.modelId} was unloaded`));
  }

  private post(m: WorkerRequest, transfer: Transferable[] = []) {
    if (!this.worker) throw new Error(`model ${this.opts.modelId} is not loaded`);
    this.worker.postMessage(m, transfer);
  }

  private receive(m: WorkerReply) {
    if (m.type === "loaded") {
      this.onLoad?.resolve({ device: m.device, fallback: m.fallback });
      this.onLoad = null;
    } else if (m.type === "unloaded") {
      this.onUnload?.();
      this.onUnload = null;
    } else if (m.type === "failed" && m.id === null) {
      this.onLoad?.reject(new Error(`cannot load ${this.task} model ${this.opts.modelId}: ${m.message}`));
      this.onLoad = null;
    } else if (m.id !== null) {
      const w = this.waiters.get(m.id);
      this.waiters.delete(m.id);
      if (m.type === "result") w?.resolve({ width: m.width, data: m.data, calls: m.calls });
      else w?.reject(new Error(`${this.task} model ${this.opts.modelId} failed: ${m.message}`));
    }
  }

  /** Fails whatever waits on the worker. */
  private fail(e: Error) {
    this.onLoad?.reject(e);
    this.onLoad = null;
    for (const w of this.waiters.values()) w.reject(e);
    this.waiters.clear();
  }
}
