import { ApiError } from "../api/http/errors";
import { retryHeaders } from "../billing/limits";

// Worker slots of one model (spec §7 "every worker for the model is busy"). A request takes the
// free slot whose cached tokens share the longest prefix with its prompt (least recently used on
// a tie, so other slots keep their caches); when none is free it waits in a short FIFO queue, and
// past the queue's length or wait → 429. A lease is released exactly once, whatever happens.

export interface PoolSlot {
  /** How many leading tokens of `tokens` this slot already holds. */
  sharedPrefix(tokens: readonly number[]): number;
}

export interface Lease<S> {
  readonly slot: S;
  /** Prompt tokens the chosen slot already held when it was taken. */
  readonly reusable: number;
  release(): void;
}

export interface PoolOptions {
  /** Requests that may wait for a slot; more are refused at once. */
  maxQueue: number;
  /** How long one may wait before it is refused. */
  maxWaitMs: number;
  modelId: string;
  /** The refusal: 429 for chat workers (spec §7), 503 for image workers. */
  busy?: "workers_busy" | "image_workers_busy";
}

interface Waiter {
  tokens: readonly number[];
  resolve(lease: Lease<any>): void;
  reject(e: unknown): void;
  timer: ReturnType<typeof setTimeout>;
}

export class SlotPool<S extends PoolSlot> {
  private free: { slot: S; usedAt: number }[];
  private queue: Waiter[] = [];
  private tick = 0;

  constructor(
    private readonly slots: S[],
    private readonly opts: PoolOptions,
  ) {
    this.free = slots.map((slot) => ({ slot, usedAt: 0 }));
  }

  get size() {
    return this.slots.length;
  }

  stats() {
    return { total: this.slots.length, busy: this.slots.length - this.free.length, queued: this.queue.length };
  }

  acquire(tokens: readonly number[], signal?: AbortSignal): Promise<Lease<S>> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.free.length > 0) return Promise.resolve(this.take(tokens));
    if (this.queue.length >= this.opts.maxQueue) return Promise.reject(this.busy());
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        tokens,
        resolve,
        reject,
        timer: setTimeout(() => this.drop(waiter, this.busy()), this.opts.maxWaitMs),
      };
      this.queue.push(waiter);
      signal?.addEventListener("abort", () => this.drop(waiter, signal.reason), { once: true });
    });
  }

  private busy() {
    const code = this.opts.busy ?? "workers_busy";
    const what = code === "image_workers_busy" ? "image worker" : "worker";
    return new ApiError(code, `every ${what} for this model is busy (${this.opts.modelId}); retry shortly`, {
      headers: retryHeaders(1000),
    });
  }

  private drop(w: Waiter, reason: unknown) {
    const i = this.queue.indexOf(w);
    if (i < 0) return;
    this.queue.splice(i, 1);
    clearTimeout(w.timer);
    w.reject(reason);
  }

  private take(tokens: readonly number[]): Lease<S> {
    let best = 0;
    let bestPrefix = -1;
    this.free.forEach((f, i) => {
      const prefix = f.slot.sharedPrefix(tokens);
      if (prefix > bestPrefix || (prefix === bestPrefix && f.usedAt < this.free[best]!.usedAt)) {
        best = i;
        bestPrefix = prefix;
      }
    });
    const [{ slot }] = this.free.splice(best, 1) as [{ slot: S; usedAt: number }];
    let released = false;
    return {
      slot,
      reusable: Math.max(0, bestPrefix),
      release: () => {
        if (released) return;
        released = true;
        this.free.push({ slot, usedAt: ++this.tick });
        const next = this.queue.shift();
        if (next) {
          clearTimeout(next.timer);
          next.resolve(this.take(next.tokens));
        }
      },
    };
  }
}
