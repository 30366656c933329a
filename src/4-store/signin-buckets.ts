// The console's sign-in buckets (issue 44): failures per client address, per account (with its
// back-off) and per known browser, as 2-services/console/throttle.ts decides them. One interface,
// two homes: this process's memory with the SQLite store, the database with PostgreSQL
// (pg/signin-buckets.ts), so that N processes give an attacker one budget, not N.

export interface Bucket {
  failures: number;
  /** First failure of the address window. */
  since: number;
  /** Latest failure. */
  last: number;
  /** No attempt of this bucket before this time (account back-off). */
  nextAt: number;
}

/** The buckets one decision reads and writes: writes land only if the decision returns. */
export interface BucketView {
  get(key: string): Bucket | undefined;
  set(key: string, b: Bucket): void;
  delete(key: string): void;
}

export interface BucketStore {
  /**
   * Runs `decide` over the buckets of `keys` as one step no other decision on those keys
   * interleaves with (in every process); what it wrote lands when it returns, nothing when it throws.
   */
  atomically<T>(keys: string[], decide: (view: BucketView) => T): Promise<T>;
}

/** Stages a decision's writes over `read`; `writes` lists them (null: deleted). */
export function stagedView(read: (key: string) => Bucket | undefined) {
  const writes = new Map<string, Bucket | null>();
  const view: BucketView = {
    get: (key) => (writes.has(key) ? (writes.get(key) ?? undefined) : read(key)),
    set: (key, b) => void writes.set(key, { ...b }),
    delete: (key) => void writes.set(key, null),
  };
  return { view, writes };
}

/** Buckets in this process's memory. `stale` decides which ones a periodic sweep forgets. */
export function memoryBuckets(stale: (key: string, b: Bucket) => boolean, now: () => number): BucketStore {
  const buckets = new Map<string, Bucket>();
  let swept = 0;
  return {
    // Synchronous inside: no await between reading and writing.
    async atomically(keys, decide) {
      const t = now();
      if (t - swept >= 60_000) {
        swept = t;
        for (const [key, b] of buckets) if (stale(key, b)) buckets.delete(key);
      }
      const { view, writes } = stagedView((key) => {
        const b = buckets.get(key);
        return b && { ...b };
      });
      const out = decide(view);
      for (const [key, b] of writes) b ? buckets.set(key, b) : buckets.delete(key);
      return out;
    },
  };
}
