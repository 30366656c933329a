// Rental billing arithmetic (spec §8: rentals at the node's price_per_hour, by the minute). Pure.
// A minute is charged when it starts: from `running_at`, minute k (1-based) starts at
// running_at + (k − 1) min. Money is integer micro-dollars; the total for m minutes is rounded up
// once, so charging minute by minute never drifts from charging the total.

export const MINUTE_MS = 60_000;

/** Minutes started by time `t` (at least 1 once running). */
export function minutesStarted(runningAt: number, t: number): number {
  return Math.max(1, Math.floor((t - runningAt) / MINUTE_MS) + 1);
}

/** Minutes billed for a rental that ran from `runningAt` to `stoppedAt`: every started minute. */
export function minutesRun(runningAt: number, stoppedAt: number): number {
  return Math.max(1, Math.ceil((stoppedAt - runningAt) / MINUTE_MS));
}

/** The cost of `minutes` minutes at `pricePerHourMicros`. */
export function costOfMinutes(pricePerHourMicros: number, minutes: number): number {
  return Math.ceil((pricePerHourMicros * minutes) / 60);
}

/** Dollars per hour (the wire and config unit) → micro-dollars, exactly for up to 6 decimals. */
export function toMicros(dollars: number): number {
  return Math.round(dollars * 1_000_000);
}

export function fromMicros(micros: number): number {
  return micros / 1_000_000;
}
