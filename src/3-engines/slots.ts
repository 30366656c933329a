import { ApiError } from "../lib/errors";
import { retryHeaders } from "../lib/errors";

// Worker slots of one model (spec §7 "every worker for the model is busy"). A request takes the
// free slot whose cached tokens share the longest prefix with its prompt (least recently used on
// a tie, so other slots keep their caches; with `adjacency`, a slot beside a busy one first among
// those within `adjacency.margin` tokens of the longest; before both, the slot that last served
// the request's cache key, within the same margin); when none is free it waits in a short FIFO queue, and
// past the queue's length or wait → 429. Batch work (spec §8) waits in a queue of its own,
// without bound or time limit, and gets a freed slot only when no live request waits for it.
// A lease is released exactly once, whatever happens.

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
  /**
   * Keep busy slots next to each other (in the order given to the pool) unless a slot further
   * away holds more than `margin` more of the prompt. llama.cpp decodes a step of a multi-sequence
   * context as one micro-batch per run of consecutive sequence ids (native/loop.cpp batches in that order).
   * A prefix of `margin` tokens or fewer counts as none when choosing (what it saves is less than
   * the cache it would overwrite), so the least recently used slot goes first among those.
   */
  adjacency?: { margin: number };
}

export interface AcquireOptions {
  batch?: boolean;
  /** The client's cache key (prompt_cache_key): the slot that last served it is preferred. */
  key?: string;
}

interface Free<S> {
  slot: S;
  usedAt: number;
  /** The cache key of the request this slot last served. */
  key?: string;
}

interface Waiter {
  tokens: readonly number[];
  key?: string;
  resolve(lease: Lease<any>): void;
  reject(e: unknown): void;
  timer?: ReturnType<typeof setTimeout>;
}

export class SlotPool<S extends PoolSlot> {
  private free: Free<S>[];
  private queue: Waiter[] = [];
  private batchQueue: Waiter[] = [];
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
    return { total: this.slots.length, busy: this.slots.length - this.free.length, queued: this.queue.length, batchQueued: this.batchQueue.length };
  }

  acquire(tokens: readonly number[], signal?: AbortSignal, opts: AcquireOptions = {}): Promise<Lease<S>> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.free.length > 0) return Promise.resolve(this.take(tokens, opts.key));
    if (opts.batch) return this.wait(this.batchQueue, tokens, opts.key, signal);
    if (this.queue.length >= this.opts.maxQueue) return Promise.reject(this.busy());
    return this.wait(this.queue, tokens, opts.key, signal, this.opts.maxWaitMs);
  }

  private wait(queue: Waiter[], tokens: readonly number[], key: string | undefined, signal?: AbortSignal, maxWaitMs?: number): Promise<Lease<S>> {
    return new Promise((resolve, reject) => {
      const waiter: Waiter = { tokens, key, resolve, reject };
      if (maxWaitMs !== undefined) waiter.timer = setTimeout(() => this.drop(queue, waiter, this.busy()), maxWaitMs);
      queue.push(waiter);
      signal?.addEventListener("abort", () => this.drop(queue, waiter, signal.reason), { once: true });
    });
  }

  /** Answers every live request still waiting for a slot with `reason` (shutdown); batch work waits on. */
  refuseWaiting(reason: unknown): void {
    for (const w of this.queue.splice(0)) {
      clearTimeout(w.timer);
      w.reject(reason);
    }
  }

  private busy() {
    const code = this.opts.busy ?? "workers_busy";
    const what = code === "image_workers_busy" ? "image worker" : "worker";
    return new ApiError(code, `every ${what} for this model is busy (${this.opts.modelId}); retry shortly`, {
      headers: retryHeaders(1000),
    });
  }

  private drop(queue: Waiter[], w: Waiter, reason: unknown) {
    const i = queue.indexOf(w);
    if (i < 0) return;
    queue.splice(i, 1);
    clearTimeout(w.timer);
    w.reject(reason);
  }

  private take(tokens: readonly number[], key?: string): Lease<S> {
    const prefixes = this.free.map((f) => f.slot.sharedPrefix(tokens));
    const longest = Math.max(...prefixes);
    const margin = this.opts.adjacency?.margin;
    // with a margin, a prefix that short counts as none: the template's opening tokens that every
    // prompt shares would otherwise draw a request onto the slot holding another prompt's cache
    // (a tool prompt's ~250 tokens of tool list, lost to the plain request that took its slot)
    const worth = (p: number) => (margin !== undefined && p <= margin ? 0 : p);
    const keyed = this.free.map((f, i) => key !== undefined && f.key === key && prefixes[i]! >= longest - (margin ?? 0));
    const free = new Set(this.free.map((f) => f.slot));
    const busy = (at: number) => at >= 0 && at < this.slots.length && !free.has(this.slots[at]!);
    const beside = this.free.map((f, i) => {
      if (margin === undefined || prefixes[i]! < longest - margin) return false;
      const at = this.slots.indexOf(f.slot);
      return busy(at - 1) || busy(at + 1);
    });
    // the key's own slot first, then beside a busy slot (both within the margin), then the longest
    // prefix, then least recently used
    const better = (i: number, j: number) => {
      if (keyed[i] !== keyed[j]) return keyed[i]!;
      if (beside[i] !== beside[j]) return beside[i]!;
      if (worth(prefixes[i]!) !== worth(prefixes[j]!)) return worth(prefixes[i]!) > worth(prefixes[j]!);
      return this.free[i]!.usedAt < this.free[j]!.usedAt;
    };
    let best = 0;
    for (let i = 1; i < this.free.length; i++) if (better(i, best)) best = i;
    const bestPrefix = prefixes[best]!;
    const [{ slot }] = this.free.splice(best, 1) as [Free<S>];
    let released = false;
    return {
      slot,
      reusable: Math.max(0, bestPrefix),
      release: () => {
        if (released) return;
        released = true;
        this.free.push({ slot, usedAt: ++this.tick, key });
        // Live requests first; batch work only takes a slot nobody live is waiting for.
        const next = this.queue.shift() ?? this.batchQueue.shift();
        if (next) {
          clearTimeout(next.timer);
          next.resolve(this.take(next.tokens, next.key));
        }
      },
    };
  }
}
