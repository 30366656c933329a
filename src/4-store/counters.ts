import type { Database } from "bun:sqlite";
import type { Clock } from "../lib/clock";
import { SlidingWindow, type WindowResult } from "./window";

// Per-key counters of the limits (issue 44): sliding windows (requests and images per minute) and
// counted leases (requests in flight, images being made). One interface, two homes: this process's
// memory with the SQLite store (one server per data dir), the database with PostgreSQL
// (pg/counters.ts), so that N processes enforce one limit, not N.

export type { WindowResult } from "./window";

export interface CounterStore {
  /** Admits `weight` for `key` if the last `windowMs` stay within `limit`, whole or not at all. */
  take(key: string, limit: number, windowMs: number, weight?: number): Promise<WindowResult>;
  /** Gives back a weight admitted within the last `windowMs` (its request was refused further on). */
  giveBack(key: string, windowMs: number, weight: number): Promise<void>;
  /** Takes a lease of `weight` on `key` if the key's leases stay within `limit` (limit ≤ 0: no limit). */
  lease(key: string, id: string, weight: number, limit: number): Promise<{ ok: true } | { ok: false; used: number }>;
  /** Ends a lease (idempotent). */
  unlease(id: string): Promise<void>;
  leased(key: string): Promise<number>;
  /** Images a key made since `since` (epoch ms), batch lines excluded: what its daily cap counts. */
  imagesSince(keyId: string, since: number): Promise<number>;
}

/** Counters in this process's memory; images made are read from the SQLite usage table. */
export function memoryCounters(db: Database, clock: Clock): CounterStore {
  const windows = new Map<number, SlidingWindow>();
  const windowOf = (ms: number) => windows.get(ms) ?? (windows.set(ms, new SlidingWindow(ms)), windows.get(ms)!);
  const leases = new Map<string, { key: string; weight: number }>();
  const totals = new Map<string, number>();
  const imagesToday = db.query<{ n: number }, [string, number]>("SELECT COALESCE(SUM(images), 0) AS n FROM usage WHERE key_id = ? AND created_at >= ? AND batch = 0");
  return {
    take: async (key, limit, windowMs, weight = 1) => windowOf(windowMs).take(key, limit, clock.now(), weight),
    giveBack: async (key, windowMs, weight) => windowOf(windowMs).giveBack(key, weight),
    // Check and take with no await between them: nothing else runs in between.
    async lease(key, id, weight, limit) {
      const used = totals.get(key) ?? 0;
      if (limit > 0 && used + weight > limit) return { ok: false, used };
      leases.set(id, { key, weight });
      totals.set(key, used + weight);
      return { ok: true };
    },
    async unlease(id) {
      const l = leases.get(id);
      if (!l) return;
      leases.delete(id);
      const left = (totals.get(l.key) ?? l.weight) - l.weight;
      if (left <= 0) totals.delete(l.key);
      else totals.set(l.key, left);
    },
    leased: async (key) => totals.get(key) ?? 0,
    imagesSince: async (keyId, since) => imagesToday.get(keyId, since)!.n,
  };
}
