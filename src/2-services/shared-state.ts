import { hostname } from "node:os";
import type { Clock } from "../lib/clock";
import { randomBase62 } from "../lib/ids";
import type { PostgresStore } from "../4-store/store";
import type { CounterStore } from "../4-store/counters";
import type { HoldStore } from "../4-store/holds";
import type { Ledger } from "../4-store/ledger";
import type { BucketStore } from "../4-store/signin-buckets";
import { postgresCounters } from "../4-store/pg/counters";
import { postgresHolds } from "../4-store/pg/holds";
import { postgresLedger } from "../4-store/pg/ledger";
import { postgresBuckets } from "../4-store/pg/signin-buckets";
import { SIGNIN_ADDRESS_WINDOW_MS, SIGNIN_FORGET_MS } from "./console/throttle";

// What several appliance processes on one PostgreSQL share that one process on SQLite keeps in its
// memory (issue 44): credit holds, rate windows and in-flight counts, image holds, sign-in buckets.
// Held things are leases owned by this process: its heartbeat renews them, and any process's
// heartbeat drops those of a process that stopped beating (killed, or cut off from the database).

/** How often this process renews its leases; they lapse 15 s after the last renewal. */
export const HEARTBEAT_MS = 3_000;

export interface SharedState {
  counters: CounterStore;
  meter: { ledger: Ledger; holds: HoldStore };
  signinBuckets: BucketStore;
  beats: (() => Promise<unknown>)[];
}

/** This process's name as an owner of leases: unique per process start, readable in the tables. */
export function processOwner(): string {
  return `${hostname()}:${process.pid}:${randomBase62(6)}`;
}

export function sharedState(store: PostgresStore, clock: Clock, owner = processOwner()): SharedState {
  const { money, fast } = store.pg;
  const holds = postgresHolds(fast, owner);
  const counters = postgresCounters(fast, owner);
  const staleness = () => {
    const now = clock.now();
    return { now, forgetBefore: now - SIGNIN_FORGET_MS, windowBefore: now - SIGNIN_ADDRESS_WINDOW_MS };
  };
  return {
    counters,
    meter: { ledger: postgresLedger(money), holds },
    signinBuckets: postgresBuckets(fast, staleness),
    beats: [() => holds.heartbeat(), () => counters.heartbeat()],
  };
}

export interface Heartbeat {
  start(): void;
  stop(): void;
  /** One beat now (tests; and start's first). */
  beat(): Promise<void>;
}

/** Runs every beat each `intervalMs`; a beat still running is not started again. */
export function createHeartbeat(beats: (() => Promise<unknown>)[], onError: (what: string, e: unknown) => void, intervalMs = HEARTBEAT_MS): Heartbeat {
  let timer: ReturnType<typeof setInterval> | null = null;
  let running: Promise<void> | null = null;
  const beat = () =>
    (running ??= Promise.all(beats.map((b) => b().catch((e) => onError("heartbeat", e))))
      .then(() => {})
      .finally(() => (running = null)));
  return {
    start() {
      if (timer || beats.length === 0) return;
      void beat();
      timer = setInterval(() => void beat(), intervalMs);
      timer.unref?.();
    },
    stop() {
      if (timer) clearInterval(timer);
      timer = null;
    },
    beat,
  };
}
