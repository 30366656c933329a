import type { Logger } from "../../lib/log";
import type { PoolSlot } from "../slots";
import type { ImageRequest } from "../types";
import type { PipelineInfo } from "./pipeline";
import { workerUrl } from "../worker-url";
import type { FromWorker, ToWorker } from "./worker-protocol";
import type { OnnxBackend } from "../onnx-device";

// The server-side handle of one image worker thread: starts it and has it load the pipeline,
// sends it one job at a time, and stops a job when its client leaves. A job's promise settles only
// when the thread is idle again, so a slot released after it can be handed on at once. A thread
// that dies fails its job and is started afresh by the next one.

export interface ImageWorkerOptions {
  modelId: string;
  index: number;
  dir: string;
  device: OnnxBackend;
  threads: number;
  logger: Logger;
}

interface Job {
  resolve(png: Uint8Array): void;
  reject(e: unknown): void;
  signal?: AbortSignal;
}

const WORKER_URL = workerUrl("src/3-engines/diffusion/worker.ts", new URL("./worker.ts", import.meta.url));

type BunWorker = Worker & { ref(): void; unref(): void };

export class ImageWorker implements PoolSlot {
  private thread: BunWorker | null = null;
  /** Loads and jobs in hand: the thread is ref'd while there are any. */
  private working = 0;
  private ready: Promise<PipelineInfo> | null = null;
  private readonly stopFlag = new Int32Array(new SharedArrayBuffer(4));
  private readonly jobs = new Map<number, Job>();
  private nextId = 1;
  private closing: (() => void) | null = null;

  constructor(private readonly opts: ImageWorkerOptions) {}

  /** Image workers hold no prompt cache worth routing to. */
  sharedPrefix(): number {
    return 0;
  }

  /** Starts the thread and loads the pipeline (once; again after a crash or a failed load). */
  start(): Promise<PipelineInfo> {
    if (this.ready) return this.ready;
    const thread = new Worker(WORKER_URL) as BunWorker;
    this.thread = thread;
    this.working = 0;
    this.hold(thread);
    this.ready = new Promise<PipelineInfo>((resolve, reject) => {
      thread.onmessage = (e: MessageEvent<FromWorker>) => {
        const m = e.data;
        if (m.type === "loaded") {
          this.letGo(thread);
          resolve(m.info);
        } else if (m.type === "load_failed") {
          reject(new Error(m.message));
          this.discard(thread);
        } else this.onMessage(m);
      };
      const failed = (message: string) => {
        if (this.thread !== thread) return;
        const error = new Error(`image worker thread failed: ${message}`);
        reject(error);
        this.opts.logger.error("image worker failed", { model: this.opts.modelId, worker: this.opts.index, error: message });
        for (const job of this.jobs.values()) job.reject(error);
        this.jobs.clear();
        this.discard(thread);
      };
      thread.onerror = (e) => failed(e.message);
      // A thread that ends without being asked (killed, out of memory) must not leave jobs waiting.
      thread.addEventListener("close", () => failed("the thread exited"));
    });
    this.ready.catch(() => {});
    const { dir, device, threads } = this.opts;
    this.post({ type: "load", dir, device, threads, stop: this.stopFlag.buffer as SharedArrayBuffer });
    return this.ready;
  }

  async generate(req: ImageRequest, signal?: AbortSignal): Promise<Uint8Array> {
    await this.start();
    signal?.throwIfAborted();
    const id = this.nextId++;
    const onAbort = () => Atomics.store(this.stopFlag, 0, id);
    signal?.addEventListener("abort", onAbort, { once: true });
    const thread = this.thread!;
    this.hold(thread);
    try {
      return await new Promise<Uint8Array>((resolve, reject) => {
        this.jobs.set(id, { resolve, reject, signal });
        this.post({ type: "generate", id, req });
      });
    } finally {
      this.letGo(thread);
      signal?.removeEventListener("abort", onAbort);
    }
  }

  /** Disposes the pipeline and ends the thread (after the job in hand, if any). */
  async stop(): Promise<void> {
    const thread = this.thread;
    if (!thread) return;
    await this.ready?.catch(() => {});
    if (this.thread !== thread) return;
    const closed = new Promise<void>((resolve) => (this.closing = resolve));
    this.post({ type: "close" });
    // Never ended before it answers: ending a worker inside a native ONNX call aborts the whole
    // process (Bun 1.4.5, measured). A thread that fails instead resolves `closed` (discard).
    const slow = setTimeout(() => this.opts.logger.warn("waiting for the image worker to finish its job before stopping", { model: this.opts.modelId, worker: this.opts.index }), 5000);
    slow.unref();
    await closed;
    clearTimeout(slow);
    this.discard(thread);
  }

  private onMessage(m: FromWorker) {
    if (m.type === "fallback") {
      this.opts.logger.warn("onnx device: CUDA session failed; this image worker uses CPU", { model: this.opts.modelId, worker: this.opts.index, error: m.error });
    } else if (m.type === "done" || m.type === "failed") {
      const job = this.jobs.get(m.id);
      this.jobs.delete(m.id);
      if (!job) return;
      if (m.type === "done") job.resolve(m.png);
      else job.reject(m.stopped ? (job.signal?.reason ?? new Error(m.message)) : new Error(m.message));
    } else if (m.type === "closed") {
      this.closing?.();
      this.closing = null;
    }
  }

  // An idle worker must not keep the process alive, so it is unref'd; but Bun runs an unref'd
  // worker's work about 40% slower (measured on the tiny set), so it is ref'd while it works.
  private hold(thread: BunWorker) {
    if (this.working++ === 0) thread.ref();
  }

  private letGo(thread: BunWorker) {
    if (this.thread === thread && --this.working === 0) thread.unref();
  }

  private post(m: ToWorker) {
    this.thread!.postMessage(m);
  }

  private discard(thread: Worker) {
    thread.terminate();
    if (this.thread !== thread) return;
    this.closing?.();
    this.closing = null;
    this.thread = null;
    this.ready = null;
  }
}
