import { ApiError } from "../../lib/errors";
import type { Logger } from "../../lib/log";
import { SlotPool } from "../slots";
import type { EngineStats, ImageEngine, ImageRequest } from "../types";
import { ImageWorker } from "./image-worker";
import { DeviceUnavailableError, requireOnnxDevice, type OnnxBackend } from "../onnx-device";

// One image model: a fixed number of image workers (manifest `slots`), each a thread with its own
// pipeline, behind a SlotPool whose refusal is 503 image_workers_busy with Retry-After (spec §7).
// In front of them a bounded queue (manifest `queue`, `queue_wait_s`; 4 requests for 60 s by default).

export interface DiffusionEngineOptions {
  modelId: string;
  dir: string;
  slots: number;
  /** Threads of each worker's ONNX Runtime sessions. */
  threads: number;
  device: OnnxBackend;
  maxQueue: number;
  maxWaitMs: number;
  logger: Logger;
}

export class DiffusionImageEngine implements ImageEngine {
  readonly modelId: string;
  private readonly workers: ImageWorker[];
  private readonly pool: SlotPool<ImageWorker>;
  private loading: Promise<void> | null = null;
  private isLoaded = false;

  constructor(private readonly opts: DiffusionEngineOptions) {
    this.modelId = opts.modelId;
    this.workers = Array.from(
      { length: opts.slots },
      (_, index) => new ImageWorker({ modelId: opts.modelId, index, dir: opts.dir, device: opts.device, threads: opts.threads, logger: opts.logger }),
    );
    this.pool = new SlotPool(this.workers, { maxQueue: opts.maxQueue, maxWaitMs: opts.maxWaitMs, modelId: opts.modelId, busy: "image_workers_busy" });
  }

  get loaded(): boolean {
    return this.isLoaded;
  }
  get device(): OnnxBackend | undefined {
    return this.isLoaded ? this.opts.device : undefined;
  }

  load(): Promise<void> {
    this.loading ??= (async () => {
      const started = performance.now();
      try {
        // Asked for WebGPU: no adapter fails the load with the reason (never a quiet CPU model).
        await requireOnnxDevice(this.opts.device, "image model", this.modelId, this.opts.logger);
        const [info] = await Promise.all(this.workers.map((w) => w.start()));
        this.isLoaded = true;
        this.opts.logger.info("image model loaded", {
          model: this.modelId,
          workers: this.workers.length,
          threads_per_worker: this.opts.threads,
          ...info,
          ms: Math.round(performance.now() - started),
        });
      } catch (e) {
        this.loading = null;
        if (e instanceof DeviceUnavailableError) throw e;
        this.opts.logger.error("image model failed to load", { model: this.modelId, dir: this.opts.dir, error: (e as Error).message });
        throw new ApiError("model_unavailable", `image model "${this.modelId}" could not be loaded; see the server log`);
      }
    })();
    return this.loading;
  }

  async unload(): Promise<void> {
    this.isLoaded = false;
    this.loading = null;
    await Promise.all(this.workers.map((w) => w.stop()));
  }

  stats(): EngineStats {
    const s = this.pool.stats();
    return { slots: s.total, busy: s.busy, queued: s.queued };
  }

  refuseWaiting(reason: unknown): void {
    this.pool.refuseWaiting(reason);
  }

  async acquire(signal?: AbortSignal) {
    await this.load();
    const lease = await this.pool.acquire([], signal);
    return {
      release: lease.release,
      generate: (req: ImageRequest, s?: AbortSignal) => lease.slot.generate(req, s),
    };
  }
}
