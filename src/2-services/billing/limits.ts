import type { Database } from "bun:sqlite";
import type { Principal } from "../accounts/types";
import { ApiError, retryHeaders } from "../../lib/errors";
import type { Clock } from "../../lib/clock";
import type { Config } from "../../lib/config";
import { memoryCounters, type CounterStore } from "../../4-store/counters";

// Per-key limits (spec §8): requests per minute, images per minute and per UTC day, in-flight caps.
// Batch work never passes through here (spec §8 "Batch and limits").

const MINUTE = 60_000;
const DAY = 86_400_000;

export type Limits = ReturnType<typeof createLimits>;

/** `counters`: where the windows and leases live (default: this process's memory, for the SQLite store). */
export function createLimits(db: Database | null, cfg: Config["limits"], clock: Clock, shared?: CounterStore) {
  const counters = shared ?? memoryCounters(db ?? noStore(), clock);
  /** A lease id of this process (ids only need to be unique). */
  let leases = 0;
  const leaseId = (what: string) => `${what}:${process.pid}:${++leases}:${clock.now()}`;
  /** Ends a lease once, whatever calls it how often. */
  /**
   * A lease's release, idempotent: resolves once the store has dropped it (never rejects: a lease
   * the store could not drop lapses with its process's heartbeat). Callers that answer a client
   * wait for it, so the client's next request finds the place free, on every store.
   */
  const once = (id: string) => {
    let released: Promise<void> | null = null;
    return (): Promise<void> => (released ??= counters.unlease(id).catch(() => {}));
  };

  return {
    /** Counts one request against the key's rpm; returns the x-ratelimit-* headers or throws 429. */
    async request(p: Principal): Promise<Record<string, string>> {
      if (p.rpm <= 0) return {};
      const r = await counters.take(`rpm:${p.keyId}`, p.rpm, MINUTE);
      if (!r.ok) {
        throw new ApiError(
          "rate_limit_exceeded",
          `rate limit reached: ${p.rpm} requests per minute for this key; retry after ${seconds(r.retryAfterMs)}s`,
          { headers: { ...retryHeaders(r.retryAfterMs), ...rateHeaders(r.limit, 0, r.retryAfterMs) } },
        );
      }
      return rateHeaders(r.limit, r.remaining, r.resetMs ?? MINUTE);
    },

    /** Takes an in-flight slot for the key; resolves to its release (idempotent; resolves once the slot is free). */
    async enter(p: Principal): Promise<() => Promise<void>> {
      if (p.inflight <= 0) return async () => {};
      const id = leaseId("inflight");
      const r = await counters.lease(`inflight:${p.keyId}`, id, 1, p.inflight);
      if (!r.ok)
        throw new ApiError(
          "concurrency_limit_exceeded",
          `this key already has ${r.used} requests in flight (limit ${p.inflight}); retry when one finishes`,
          { headers: retryHeaders(1000) },
        );
      return once(id);
    },

    /**
     * Admits `n` images against the per-minute and per-day caps. The returned release drops the
     * in-flight day hold; with `refund` (the request was refused before any work) it also gives
     * the per-minute allowance back.
     */
    async images(p: Principal, n: number): Promise<(refund?: boolean) => Promise<void>> {
      const perDay = p.kind === "free" ? cfg.free_images_per_day : cfg.premium_images_per_day;
      const perMinute = p.kind === "free" ? cfg.free_images_per_minute : cfg.premium_images_per_minute;
      for (const [cap, what] of [[perDay, "per day"], [perMinute, "per minute"]] as const)
        if (cap > 0 && n > cap) throw new ApiError("invalid_request", `this key may generate at most ${cap} images ${what}; n=${n}`, { param: "n" });
      if (perDay === 0) throw new ApiError("daily_limit_exceeded", "image generation is not enabled for this key");
      const now = clock.now();
      const dayStart = now - (now % DAY);
      // The day's cap counts images made today and images being made now (held by leases).
      const id = leaseId("images");
      const made = await counters.imagesSince(p.keyId, dayStart);
      if (made + n > perDay || !(await counters.lease(`images:${p.keyId}`, id, n, perDay - made)).ok) {
        const wait = dayStart + DAY - now;
        throw new ApiError("daily_limit_exceeded", `daily image limit reached: ${perDay} images per day for this key (resets 00:00 UTC)`, {
          headers: retryHeaders(wait),
        });
      }
      if (perMinute > 0) {
        const r = await counters.take(`images-minute:${p.keyId}`, perMinute, MINUTE, n);
        if (!r.ok) {
          await counters.unlease(id);
          throw new ApiError("rate_limit_exceeded", `image rate limit reached: ${perMinute} images per minute for this key`, {
            headers: retryHeaders(r.retryAfterMs),
          });
        }
      }
      const release = once(id);
      return async (refund = false) => {
        if (refund && perMinute > 0) await counters.giveBack(`images-minute:${p.keyId}`, MINUTE, n).catch(() => {});
        await release();
      };
    },

  };
}

function seconds(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000));
}

function rateHeaders(limit: number, remaining: number, resetMs: number): Record<string, string> {
  return {
    "x-ratelimit-limit-requests": String(limit),
    "x-ratelimit-remaining-requests": String(remaining),
    "x-ratelimit-reset-requests": `${Math.max(0, Math.ceil(resetMs) / 1000)}s`,
  };
}

function noStore(): never {
  throw new Error("the limits need a SQLite handle or a shared counter store");
}
