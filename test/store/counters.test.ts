import { afterAll, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { memoryCounters, type CounterStore } from "../../src/4-store/counters";
import { openDatabase } from "../../src/4-store/db";
import { connectPostgres, migratePostgres, type PgPools } from "../../src/4-store/pg/db";
import { postgresCounters } from "../../src/4-store/pg/counters";
import { systemClock } from "../../src/lib/clock";
import { tempDir } from "../helpers/app";
import { freshDatabase } from "../helpers/postgres";

// Issue 44: the limits' counters (src/4-store/counters.ts) in memory (the SQLite store) and in
// PostgreSQL, one suite: a sliding window admits a weight whole or not at all and says when to
// retry; leases count while they last; three processes at once admit exactly one limit's worth,
// not three; on PostgreSQL the leases of a process that stopped beating lapse.

interface Backend {
  stores(n: number): CounterStore[];
  close(): Promise<void>;
  pools?: PgPools[];
}

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

async function memoryBackend(): Promise<Backend> {
  const dir = tempDir("appliance-counters-");
  dirs.push(dir);
  const db = openDatabase(join(dir, "store.sqlite"));
  const store = memoryCounters(db, systemClock);
  return { stores: (n) => Array.from({ length: n }, () => store), close: async () => db.close() };
}

async function postgresBackend(): Promise<Backend> {
  const url = await freshDatabase("counters");
  const main = connectPostgres(url);
  await migratePostgres(main.money);
  const pools: PgPools[] = [main];
  return {
    pools,
    stores: (n) => Array.from({ length: n }, (_, i) => postgresCounters((i === 0 ? main : (pools[pools.length] = connectPostgres(url))).fast, `proc-${i}`)),
    close: async () => void (await Promise.all(pools.map((p) => p.close()))),
  };
}

for (const [name, make] of [["memory (SQLite store)", memoryBackend], ["PostgreSQL", postgresBackend]] as const) {
  describe(`the limits' counters in ${name}`, () => {
    test("a window admits up to its limit, whole weights only, says when to retry, and takes a weight back", async () => {
      const b = await make();
      try {
        const [c] = b.stores(1);
        const taken = [await c!.take("rpm:k", 3, 60_000), await c!.take("rpm:k", 3, 60_000), await c!.take("rpm:k", 3, 60_000)];
        expect(taken.map((r) => [r.ok, r.remaining])).toEqual([[true, 2], [true, 1], [true, 0]]);
        const refused = await c!.take("rpm:k", 3, 60_000);
        expect(refused.ok).toBe(false);
        expect(refused.retryAfterMs).toBeGreaterThan(0);
        expect(refused.retryAfterMs).toBeLessThanOrEqual(60_000);
        await c!.giveBack("rpm:k", 60_000, 1);
        expect((await c!.take("rpm:k", 3, 60_000)).ok).toBe(true);
        expect((await c!.take("img:k", 3, 60_000, 2)).ok).toBe(true);
        expect((await c!.take("img:k", 3, 60_000, 2)).ok).toBe(false); // 2 more would make 4: none taken
        expect((await c!.take("img:k", 3, 60_000, 1)).ok).toBe(true);
        expect((await c!.take("other:k", 1, 60_000)).ok).toBe(true); // keys count apart
      } finally {
        await b.close();
      }
    }, 30_000);

    test("leases count while they last; ending one twice gives back once; a limit of 0 is none", async () => {
      const b = await make();
      try {
        const [c] = b.stores(1);
        expect(await c!.lease("inflight:k", "a", 1, 2)).toEqual({ ok: true });
        expect(await c!.lease("inflight:k", "b", 1, 2)).toEqual({ ok: true });
        expect(await c!.lease("inflight:k", "c", 1, 2)).toEqual({ ok: false, used: 2 });
        await c!.unlease("a");
        await c!.unlease("a");
        expect(await c!.leased("inflight:k")).toBe(1);
        expect(await c!.lease("inflight:k", "c", 1, 2)).toEqual({ ok: true });
        expect(await c!.lease("inflight:k", "d", 1, 2)).toEqual({ ok: false, used: 2 });
        expect(await c!.lease("free:k", "e", 50, 0)).toEqual({ ok: true });
      } finally {
        await b.close();
      }
    }, 30_000);

    test("three processes at once: 90 requests against 30 a minute admit 30; 60 leases against 10 admit 10", async () => {
      const b = await make();
      try {
        const stores = b.stores(3);
        const takes = await Promise.all(Array.from({ length: 90 }, (_, i) => stores[i % 3]!.take("rpm:busy", 30, 60_000)));
        expect(takes.filter((r) => r.ok)).toHaveLength(30);
        const leases = await Promise.all(Array.from({ length: 60 }, (_, i) => stores[i % 3]!.lease("inflight:busy", `l${i}`, 1, 10)));
        expect(leases.filter((r) => r.ok)).toHaveLength(10);
        expect(await stores[2]!.leased("inflight:busy")).toBe(10);
      } finally {
        await b.close();
      }
    }, 30_000);
  });
}

test("PostgreSQL: a process that stopped beating has its leases lapse; a live one's are renewed", async () => {
  const b = await postgresBackend();
  try {
    const fast = b.pools![0]!.fast;
    const dead = postgresCounters(fast, "dead", 200);
    const live = postgresCounters(fast, "live", 200);
    expect(await dead.lease("inflight:k", "d1", 1, 2)).toEqual({ ok: true });
    expect(await live.lease("inflight:k", "l1", 1, 2)).toEqual({ ok: true });
    expect(await live.lease("inflight:k", "l2", 1, 2)).toEqual({ ok: false, used: 2 });
    for (let i = 0; i < 4; i++) {
      await Bun.sleep(100);
      await live.heartbeat();
    }
    expect(await live.leased("inflight:k")).toBe(1);
    expect(await live.lease("inflight:k", "l2", 1, 2)).toEqual({ ok: true });
  } finally {
    await b.close();
  }
}, 30_000);
