import { describe, expect, test } from "bun:test";
import { createSigninThrottle, SIGNIN_FAILURES_PER_ADDRESS, SIGNIN_FREE_FAILURES, staleBucket } from "../../src/2-services/console/throttle";
import { connectPostgres, migratePostgres, type PgPools } from "../../src/4-store/pg/db";
import { postgresBuckets } from "../../src/4-store/pg/signin-buckets";
import { memoryBuckets, type BucketStore } from "../../src/4-store/signin-buckets";
import { ApiError } from "../../src/lib/errors";
import { ManualClock } from "../../src/lib/clock";
import { freshDatabase } from "../helpers/postgres";

// Issue 44: the console's sign-in buckets (src/4-store/signin-buckets.ts) in memory (the SQLite
// store) and in PostgreSQL, through the throttle that uses them: the same decisions on both, and on
// PostgreSQL one budget for every process — 60 wrong sign-ins from one address at once, through
// three processes, check no more passwords than the address's budget.

const stale = (clock: ManualClock) => () => ({ forgetBefore: clock.now() - 24 * 3_600_000, windowBefore: clock.now() - 15 * 60_000, now: clock.now() });

async function postgres(n: number, clock: ManualClock): Promise<{ stores: BucketStore[]; pools: PgPools[] }> {
  const url = await freshDatabase("signin");
  const pools = Array.from({ length: n }, () => connectPostgres(url));
  await migratePostgres(pools[0]!.money);
  return { stores: pools.map((p) => postgresBuckets(p.fast, stale(clock))), pools };
}

const refusedOrNot = async (p: Promise<unknown>) =>
  p.then(
    () => "checked",
    (e) => (e instanceof ApiError && e.code === "rate_limit_exceeded" ? "refused" : String(e)),
  );

for (const name of ["memory (SQLite store)", "PostgreSQL"] as const) {
  describe(`sign-in buckets in ${name}`, () => {
    test("an account's free failures pass, the next waits; a success refunds and ends the run", async () => {
      const clock = new ManualClock();
      const pg = name === "PostgreSQL" ? await postgres(1, clock) : null;
      try {
        const th = createSigninThrottle(clock, pg ? pg.stores[0] : memoryBuckets((k, b) => staleBucket(k, b, clock.now()), () => clock.now()));
        const attempt = (address: string) => ({ account: "acct:v1", address, device: null });
        for (let i = 0; i < SIGNIN_FREE_FAILURES; i++) expect(await refusedOrNot(th.reserve(attempt(`198.51.100.${i}`)))).toBe("checked");
        expect(await refusedOrNot(th.reserve(attempt("198.51.100.99")))).toBe("refused");
        clock.advance(1000);
        const r = await th.reserve(attempt("198.51.100.98"));
        await th.succeeded(r);
        expect(await refusedOrNot(th.reserve(attempt("198.51.100.97")))).toBe("checked");
      } finally {
        await Promise.all((pg?.pools ?? []).map((p) => p.close()));
      }
    }, 30_000);
  });
}

test("PostgreSQL: 60 wrong sign-ins from one address at once through three processes check at most the address's budget", async () => {
  const clock = new ManualClock();
  const { stores, pools } = await postgres(3, clock);
  try {
    const throttles = stores.map((s) => createSigninThrottle(clock, s));
    // Different accounts, so only the address budget stands between the attacker and the passwords.
    const outcomes = await Promise.all(Array.from({ length: 60 }, (_, i) => refusedOrNot(throttles[i % 3]!.reserve({ account: `acct${i}:v1`, address: "203.0.113.50", device: null }))));
    expect(outcomes.filter((o) => o === "checked")).toHaveLength(SIGNIN_FAILURES_PER_ADDRESS);
    expect(outcomes.filter((o) => o === "refused")).toHaveLength(60 - SIGNIN_FAILURES_PER_ADDRESS);
  } finally {
    await Promise.all(pools.map((p) => p.close()));
  }
}, 30_000);
