/**
 * Exact sliding-window counter: remembers each admitted event (with a weight) for `windowMs`.
 * `take` admits the whole weight or nothing.
 */
export class SlidingWindow {
  private events = new Map<string, { at: number; weight: number }[]>();

  constructor(private windowMs: number) {}

  take(key: string, limit: number, now: number, weight = 1): WindowResult {
    const list = this.prune(key, now);
    const used = list.reduce((n, e) => n + e.weight, 0);
    if (used + weight > limit) {
      return { ok: false, limit, remaining: Math.max(0, limit - used), retryAfterMs: this.freeAfter(list, used + weight - limit, now) };
    }
    list.push({ at: now, weight });
    if (list.length === 1) this.events.set(key, list);
    return { ok: true, limit, remaining: limit - used - weight, retryAfterMs: 0, resetMs: list[0]!.at + this.windowMs - now };
  }

  /** Gives back an admitted weight (the request it counted was refused further on). */
  giveBack(key: string, weight: number): void {
    const list = this.events.get(key);
    if (!list) return;
    const i = list.findLastIndex((e) => e.weight === weight);
    if (i >= 0) list.splice(i, 1);
  }

  private prune(key: string, now: number) {
    const list = this.events.get(key) ?? [];
    let drop = 0;
    while (drop < list.length && list[drop]!.at + this.windowMs <= now) drop++;
    if (drop) list.splice(0, drop);
    if (list.length === 0) this.events.delete(key);
    return list;
  }

  /** How long until enough of the oldest events have left the window to free `need` units. */
  private freeAfter(list: { at: number; weight: number }[], need: number, now: number): number {
    let freed = 0;
    for (const e of list) {
      freed += e.weight;
      if (freed >= need) return Math.max(1, e.at + this.windowMs - now);
    }
    return this.windowMs;
  }
}

export interface WindowResult {
  ok: boolean;
  limit: number;
  remaining: number;
  retryAfterMs: number;
  /** When the oldest counted event leaves the window (admitted requests only). */
  resetMs?: number;
}
