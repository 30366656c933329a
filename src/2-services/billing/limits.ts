import type { Database } from "bun:sqlite";
import type { Principal } from "../accounts/types";
import { ApiError, retryHeaders } from "../../lib/errors";
import type { Clock } from "../../lib/clock";
import type { Config } from "../../lib/config";
import { SlidingWindow } from "./window";

// Per-key limits (spec §8): requests per minute, images per minute and per UTC day, in-flight caps.
// Batch work never passes through here (spec §8 "Batch and limits").

const MINUTE = 60_000;
const DAY = 86_400_000;

export type Limits = ReturnType<typeof createLimits>;

export function createLimits(db: Database, cfg: Config["limits"], clock: Clock) {
  const requests = new SlidingWindow(MINUTE);
  const imageMinute = new SlidingWindow(MINUTE);
  const inflight = new Map<string, number>();
  const imagesHeld = new Map<string, number>();
  const imagesToday = db.query<{ n: number }, [string, number]>(
    "SELECT COALESCE(SUM(images), 0) AS n FROM usage WHERE key_id = ? AND created_at >= ? AND batch = 0",
  );

  return {
    /** Counts one request against the key's rpm; returns the x-ratelimit-* headers or throws 429. */
    request(p: Principal): Record<string, string> {
      if (p.rpm <= 0) return {};
      const r = requests.take(p.keyId, p.rpm, clock.now());
      if (!r.ok) {
        throw new ApiError(
          "rate_limit_exceeded",
          `rate limit reached: ${p.rpm} requests per minute for this key; retry after ${seconds(r.retryAfterMs)}s`,
          { headers: { ...retryHeaders(r.retryAfterMs), ...rateHeaders(r.limit, 0, r.retryAfterMs) } },
        );
      }
      return rateHeaders(r.limit, r.remaining, r.resetMs ?? MINUTE);
    },

    /** Takes an in-flight slot for the key; returns its release (idempotent). */
    enter(p: Principal): () => void {
      if (p.inflight <= 0) return () => {};
      const n = inflight.get(p.keyId) ?? 0;
      if (n >= p.inflight)
        throw new ApiError(
          "concurrency_limit_exceeded",
          `this key already has ${n} requests in flight (limit ${p.inflight}); retry when one finishes`,
          { headers: retryHeaders(1000) },
        );
      inflight.set(p.keyId, n + 1);
      let released = false;
      return () => {
        if (released) return;
        released = true;
        const left = (inflight.get(p.keyId) ?? 1) - 1;
        if (left <= 0) inflight.delete(p.keyId);
        else inflight.set(p.keyId, left);
      };
    },

    /**
     * Admits `n` images against the per-minute and per-day caps. The returned release drops the
     * in-flight day hold; with `refund` (the request was refused before any work) it also gives
     * the per-minute allowance back.
     */
    images(p: Principal, n: number): (refund?: boolean) => void {
      const perDay = p.kind === "free" ? cfg.free_images_per_day : cfg.premium_images_per_day;
      const perMinute = p.kind === "free" ? cfg.free_images_per_minute : cfg.premium_images_per_minute;
      for (const [cap, what] of [[perDay, "per day"], [perMinute, "per minute"]] as const)
        if (cap > 0 && n > cap) throw new ApiError("invalid_request", `this key may generate at most ${cap} images ${what}; n=${n}`, { param: "n" });
      if (perDay === 0) throw new ApiError("daily_limit_exceeded", "image generation is not enabled for this key");
      const now = clock.now();
      const dayStart = now - (now % DAY);
      const held = imagesHeld.get(p.keyId) ?? 0;
      const used = imagesToday.get(p.keyId, dayStart)!.n + held;
      if (used + n > perDay) {
        const wait = dayStart + DAY - now;
        throw new ApiError("daily_limit_exceeded", `daily image limit reached: ${perDay} images per day for this key (resets 00:00 UTC)`, {
          headers: retryHeaders(wait),
        });
      }
      if (perMinute > 0) {
        const r = imageMinute.take(p.keyId, perMinute, now, n);
        if (!r.ok)
          throw new ApiError("rate_limit_exceeded", `image rate limit reached: ${perMinute} images per minute for this key`, {
            headers: retryHeaders(r.retryAfterMs),
          });
      }
      imagesHeld.set(p.keyId, held + n);
      let released = false;
      return (refund = false) => {
        if (released) return;
        released = true;
        if (refund && perMinute > 0) imageMinute.giveBack(p.keyId, n);
        const left = (imagesHeld.get(p.keyId) ?? n) - n;
        if (left <= 0) imagesHeld.delete(p.keyId);
        else imagesHeld.set(p.keyId, left);
      };
    },

    inflightCount: (keyId: string) => inflight.get(keyId) ?? 0,
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
