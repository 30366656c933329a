import type { SQL } from "bun";
import { stagedView, type Bucket, type BucketStore } from "../signin-buckets";

// The console's sign-in buckets on PostgreSQL (the interface: ../signin-buckets.ts), on the
// asynchronously committing pool. A decision locks its keys (transaction-scoped advisory locks, in
// one order), reads their rows, decides, and writes back what it changed, in one transaction: two
// processes deciding on one account or address take turns. Rows nobody could still count are
// deleted by a sweep at most once a minute per process.

export function postgresBuckets(fast: SQL, staleBefore: () => { forgetBefore: number; windowBefore: number; now: number }): BucketStore {
  let swept = 0;
  return {
    async atomically(keys, decide) {
      const sorted = [...new Set(keys)].sort();
      return fast.begin(async (tx) => {
        for (const k of sorted) await tx`SELECT pg_advisory_xact_lock(hashtext(${`signin:${k}`}))`;
        const rows = await tx`SELECT key, failures, since, last, next_at FROM signin_buckets WHERE key IN ${tx(sorted)}`;
        const current = new Map<string, Bucket>(
          rows.map((r: { key: string; failures: string; since: string; last: string; next_at: string }) => [
            r.key,
            { failures: Number(r.failures), since: Number(r.since), last: Number(r.last), nextAt: Number(r.next_at) },
          ]),
        );
        const { view, writes } = stagedView((key) => {
          const b = current.get(key);
          return b && { ...b };
        });
        const out = decide(view);
        for (const [key, b] of writes) {
          if (b) {
            await tx`INSERT INTO signin_buckets (key, failures, since, last, next_at) VALUES (${key}, ${b.failures}, ${b.since}, ${b.last}, ${b.nextAt})
              ON CONFLICT (key) DO UPDATE SET failures = EXCLUDED.failures, since = EXCLUDED.since, last = EXCLUDED.last, next_at = EXCLUDED.next_at`;
          } else await tx`DELETE FROM signin_buckets WHERE key = ${key}`;
        }
        const s = staleBefore();
        if (s.now - swept >= 60_000) {
          swept = s.now;
          await tx`DELETE FROM signin_buckets WHERE last < ${s.forgetBefore} AND next_at <= ${s.now} AND since < ${s.windowBefore}`;
        }
        return out;
      });
    },
  };
}
