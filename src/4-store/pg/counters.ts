import type { SQL } from "bun";
import { DB_NOW_MS as NOW } from "./db";
import type { CounterStore, WindowResult } from "../counters";

// The limits' counters on PostgreSQL (the interface: ../counters.ts), on the asynchronously
// committing pool. Each operation on one key is one call of a database function (migration 018)
// that runs under a transaction-scoped advisory lock on the key's hash, so N processes admit against one count: a window sums its events of the last
// windowMs and inserts the new one if the sum stays within the limit; a lease sums the key's live
// leases likewise. Times are the database's clock. Leases belong to this process (`owner`) and
// lapse LEASE_MS after its last heartbeat; `heartbeat()` renews them, drops lapsed leases of any
// process, and trims window events older than the longest window (an hour).

export const LEASE_MS = 15_000;
const KEEP_EVENTS_MS = 3_600_000;

export interface PgCounterStore extends CounterStore {
  heartbeat(): Promise<void>;
}

export function postgresCounters(fast: SQL, owner: string, leaseMs = LEASE_MS): PgCounterStore {
  return {
    async take(key, limit, windowMs, weight = 1): Promise<WindowResult> {
      // One call (migration 018): the key's lock, the window's sum, the event if it fits.
      const [r] = await fast`SELECT ok, used, oldest, retry_after_ms, now_ms FROM appliance_take_rate(${key}, ${limit}, ${windowMs}, ${weight})`;
      const used = Number(r.used);
      if (!r.ok) return { ok: false, limit, remaining: Math.max(0, limit - used), retryAfterMs: Number(r.retry_after_ms) };
      const now = Number(r.now_ms);
      const oldest = r.oldest === null ? now : Number(r.oldest);
      return { ok: true, limit, remaining: limit - used - weight, retryAfterMs: 0, resetMs: oldest + windowMs - now };
    },
    async giveBack(key, windowMs, weight) {
      await fast.unsafe(
        `DELETE FROM rate_events WHERE id = (SELECT id FROM rate_events WHERE key = $1 AND weight = $2 AND at > ${NOW} - $3 ORDER BY at DESC LIMIT 1)`,
        [key, weight, windowMs],
      );
    },
    async lease(key, id, weight, limit) {
      const [r] = await fast`SELECT ok, used FROM appliance_take_lease(${id}, ${key}, ${weight}, ${limit}, ${owner}, ${leaseMs})`;
      return r.ok ? { ok: true as const } : { ok: false as const, used: Number(r.used) };
    },
    async unlease(id) {
      await fast`DELETE FROM counted_leases WHERE id = ${id}`;
    },
    async leased(key) {
      const [sum] = await fast.unsafe(`SELECT COALESCE(SUM(weight), 0) AS used FROM counted_leases WHERE key = $1 AND expires_at >= ${NOW}`, [key]);
      return Number(sum.used);
    },
    async imagesSince(keyId, since) {
      const [r] = await fast`SELECT COALESCE(SUM(images), 0) AS n FROM usage WHERE key_id = ${keyId} AND created_at >= ${since} AND batch = 0`;
      return Number(r.n);
    },
    async heartbeat() {
      await fast.unsafe(`UPDATE counted_leases SET expires_at = ${NOW} + $1 WHERE owner = $2`, [leaseMs, owner]);
      await fast.unsafe(`DELETE FROM counted_leases WHERE expires_at < ${NOW}`);
      await fast.unsafe(`DELETE FROM rate_events WHERE at < ${NOW} - $1`, [KEEP_EVENTS_MS]);
    },
  };
}
