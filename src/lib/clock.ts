/** Time source, injected so limits and expiry can be tested without sleeping. Milliseconds since epoch. */
export interface Clock {
  now(): number;
}

/** Epoch ms → the wire's Unix seconds (null stays null). */
export function unixSeconds(ms: number): number;
export function unixSeconds(ms: number | null): number | null;
export function unixSeconds(ms: number | null): number | null {
  return ms === null ? null : Math.floor(ms / 1000);
}

export const systemClock: Clock = { now: () => Date.now() };

/** A clock tests move by hand. */
export class ManualClock implements Clock {
  constructor(private t = Date.UTC(2026, 0, 1)) {}
  now(): number {
    return this.t;
  }
  advance(ms: number): void {
    this.t += ms;
  }
  set(ms: number): void {
    this.t = ms;
  }
}
