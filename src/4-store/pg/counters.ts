import type { SQL } from "bun";
import { DB_NOW_MS as NOW } from "./db";
import type { CounterStore, WindowResult } from "../counters";

// The limits' counters on PostgreSQL (the interface: ../counters.ts), on the asynchronously
// committing pool. Each operation on one key runs under a transaction-scoped advisory lock on the
// key's hash, so N processes admit against one count: a window sums its events of the last
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
      return fast.begin(async (tx) => {
        await tx`SELECT pg_advisory_xact_lock(hashtext(${key}))`;
        const [now] = await tx.unsafe(`SELECT ${NOW} AS t`);
        const t = Number(now.t);
        const events = (await tx`SELECT at, weight FROM rate_events WHERE key = ${key} AND at > ${t - windowMs} ORDER BY at`).map((e: { at: string; weight: string }) => ({ at: Number(e.at), weight: Number(e.weight) }));
        const used = events.reduce((n: number, e: { weight: number }) => n + e.weight, 0);
        if (used + weight > limit) {
          // How long until enough of the oldest events have left the window.
          let freed = 0;
          let retryAfterMs = windowMs;
          for (const e of events) {
            freed += e.weight;
            if (freed >= used + weight - limit) {
              retryAfterMs = Math.max(1, e.at + windowMs - t);
              break;
            }
          }
          return { ok: false, limit, remaining: Math.max(0, limit - used), retryAfterMs };
        }
        await tx`INSERT INTO rate_events (key, at, weight) VALUES (${key}, ${t}, ${weight})`;
        const oldest = events[0]?.at ?? t;
        return { ok: true, limit, remaining: limit - used - weight, retryAfterMs: 0, resetMs: oldest + windowMs - t };
      });
    },
    async giveBack(key, windowMs, weight) {
      await fast.unsafe(
        `DELETE FROM rate_events WHERE id = (SELECT id FROM rate_events WHERE key = $1 AND weight = $2 AND at > ${NOW} - $3 ORDER BY at DESC LIMIT 1)`,
        [key, weight, windowMs],
      );
    },
    async lease(key, id, weight, limit) {
      return fast.begin(async (tx) => {
        await tx`SELECT pg_advisory_xact_lock(hashtext(${key}))`;
        const [sum] = await tx.unsafe(`SELECT COALESCE(SUM(weight), 0) AS used FROM counted_leases WHERE key = $1 AND expires_at >= ${NOW}`, [key]);
        const used = Number(sum.used);
        if (limit > 0 && used + weight > limit) return { ok: false as const, used };
        await tx.unsafe(`INSERT INTO counted_leases (id, key, weight, owner, expires_at) VALUES ($1, $2, $3, $4, ${NOW} + $5)`, [id, key, weight, owner, leaseMs]);
        return { ok: true as const };
      });
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
