// Micro-batching for encoder models: sequences from concurrent requests are gathered into one run
// of the model. A run starts when the first waiting sequence has waited `maxDelayMs` (0: the next
// turn of the event loop), when a full batch is waiting, or as soon as the previous run ends (what
// queued meanwhile has waited long enough). A run takes sequences first come, first served, up to
// `maxBatch` sequences and `maxTokens` padded tokens (sequences × the longest one), and always at
// least one. One run at a time per model: the runtime already uses every thread it was given.
// Results go back to each request in its own order; a failed run fails only the requests that had
// sequences in it; a request whose signal aborts is dropped from the queue and answered at once,
// and its sequences already in a run are simply not delivered.

export interface BatchLimits {
  maxDelayMs: number;
  maxBatch: number;
  maxTokens: number;
}

/**
 * No added wait by default: the model runs in a worker, so requests that arrive while a batch runs
 * form the next one, and a lone request starts on the next turn of the event loop with whatever
 * arrived in the same turn. (Measured: a 2 ms wait made lone requests slower and batched no more.)
 */
export const DEFAULT_BATCH_LIMITS: BatchLimits = { maxDelayMs: 0, maxBatch: 64, maxTokens: 16_384 };

interface Job<R> {
  results: R[];
  left: number;
  done: boolean;
  resolve(r: R[]): void;
  reject(e: unknown): void;
}

interface Entry<S, R> {
  job: Job<R>;
  index: number;
  seq: S;
  length: number;
}

export class MicroBatcher<S, R> {
  private queue: Entry<S, R>[] = [];
  private timer: { cancel(): void } | null = null;
  private running = false;
  /** Model runs so far (tests and stats). */
  runs = 0;

  constructor(
    private readonly run: (seqs: S[]) => Promise<R[]>,
    private readonly lengthOf: (seq: S) => number,
    private readonly limits: BatchLimits = DEFAULT_BATCH_LIMITS,
  ) {}

  get queued(): number {
    return this.queue.length;
  }

  /** Resolves with one result per sequence, in order. */
  submit(seqs: S[], signal?: AbortSignal): Promise<R[]> {
    if (signal?.aborted) return Promise.reject(signal.reason ?? new Error("aborted"));
    if (!seqs.length) return Promise.resolve([]);
    return new Promise<R[]>((resolve, reject) => {
      const job: Job<R> = { results: new Array(seqs.length), left: seqs.length, done: false, resolve, reject };
      const onAbort = () => {
        this.finish(job, signal!.reason ?? new Error("aborted"));
        this.queue = this.queue.filter((e) => e.job !== job);
      };
      if (signal) {
        signal.addEventListener("abort", onAbort, { once: true });
        job.resolve = (r) => (signal.removeEventListener("abort", onAbort), resolve(r));
        job.reject = (e) => (signal.removeEventListener("abort", onAbort), reject(e));
      }
      seqs.forEach((seq, index) => this.queue.push({ job, index, seq, length: this.lengthOf(seq) }));
      this.schedule();
    });
  }

  private schedule() {
    if (this.running || !this.queue.length) return;
    if (this.fullBatchWaiting()) return this.pump();
    this.timer ??= later(() => this.pump(), this.limits.maxDelayMs);
  }

  private fullBatchWaiting(): boolean {
    const n = this.take(false).length;
    return n >= this.limits.maxBatch || n < this.queue.length;
  }

  /** The next batch from the head of the queue (removed when `remove`). */
  private take(remove: boolean): Entry<S, R>[] {
    const batch: Entry<S, R>[] = [];
    let longest = 0;
    for (const e of this.queue) {
      const next = Math.max(longest, e.length);
      if (batch.length && (batch.length >= this.limits.maxBatch || (batch.length + 1) * next > this.limits.maxTokens)) break;
      batch.push(e);
      longest = next;
    }
    if (remove) this.queue.splice(0, batch.length);
    return batch;
  }

  private pump() {
    this.timer?.cancel();
    this.timer = null;
    if (this.running || !this.queue.length) return;
    const batch = this.take(true);
    this.running = true;
    this.runs++;
    const seqs = batch.map((e) => e.seq);
    void Promise.resolve()
      .then(() => this.run(seqs))
      .then(
      (results) => {
        batch.forEach((e, i) => {
          if (e.job.done) return;
          e.job.results[e.index] = results[i]!;
          if (--e.job.left === 0) this.finish(e.job);
        });
      },
      (error) => {
        for (const e of batch) this.finish(e.job, error);
        // A failed request's other sequences need not run.
        this.queue = this.queue.filter((e) => !e.job.done);
      },
    ).finally(() => {
      this.running = false;
      // What queued during the run has waited at least that long: run it now.
      if (this.queue.length) this.pump();
    });
  }

  private finish(job: Job<R>, error?: unknown) {
    if (job.done) return;
    job.done = true;
    if (error === undefined) job.resolve(job.results);
    else job.reject(error);
  }
}

/** A wait of `ms`; 0 is the next turn of the event loop (Bun's setTimeout(0) waits a millisecond or more). */
function later(fn: () => void, ms: number): { cancel(): void } {
  if (ms > 0) {
    const t = setTimeout(fn, ms);
    return { cancel: () => clearTimeout(t) };
  }
  const i = setImmediate(fn);
  return { cancel: () => clearImmediate(i) };
}
