import { afterAll, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { openDatabase } from "../../src/4-store/db";
import { memoryHolds, type HoldStore } from "../../src/4-store/holds";
import { connectPostgres, migratePostgres, type PgPools } from "../../src/4-store/pg/db";
import { postgresHolds } from "../../src/4-store/pg/holds";
import { postgresLedger } from "../../src/4-store/pg/ledger";
import { usageRepo } from "../../src/4-store/usage";
import { tempDir } from "../helpers/app";
import { freshDatabase } from "../helpers/postgres";

// Issue 44: credit holds (src/4-store/holds.ts) in memory (the SQLite store) and in PostgreSQL,
// one suite: admission needs balance (or trial) left after the holds, so an account ends below zero
// by at most one request's hold; on PostgreSQL, three processes admitting at once admit exactly
// what one would, a settlement takes its hold away in its own transaction, and the holds of a
// process that stopped beating are dropped by the others.

interface Backend {
  /** The hold stores of `n` processes on one store (memory: one process, so one store). */
  stores(n: number): HoldStore[];
  account(id: string, balance: number, trialUsed?: number): Promise<void>;
  close(): Promise<void>;
}

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

async function memoryBackend(): Promise<Backend> {
  const dir = tempDir("appliance-holds-");
  dirs.push(dir);
  const db = openDatabase(join(dir, "store.sqlite"));
  const usage = usageRepo(db);
  const store = memoryHolds((id) => usage.balance(id) ?? null);
  return {
    stores: (n) => Array.from({ length: n }, () => store),
    account: async (id, balance, trialUsed = 0) => void db.query("INSERT INTO accounts (id, name, balance_micros, trial_tokens_used, created_at) VALUES (?, ?, ?, ?, 1)").run(id, id, balance, trialUsed),
    close: async () => db.close(),
  };
}

async function postgresBackend(): Promise<Backend & { pools: PgPools[] }> {
  const url = await freshDatabase("holds");
  const main = connectPostgres(url);
  await migratePostgres(main.money);
  const pools: PgPools[] = [main];
  return {
    pools,
    stores: (n) => Array.from({ length: n }, (_, i) => postgresHolds((i === 0 ? main : (pools[pools.length] = connectPostgres(url))).fast, `proc-${i}`)),
    account: async (id, balance, trialUsed = 0) => void (await main.money`INSERT INTO accounts (id, name, balance_micros, trial_tokens_used, created_at) VALUES (${id}, ${id}, ${balance}, ${trialUsed}, 1)`),
    close: async () => void (await Promise.all(pools.map((p) => p.close()))),
  };
}

const money = { money: true, trialLimit: null };

for (const [name, make] of [["memory (SQLite store)", memoryBackend], ["PostgreSQL", postgresBackend]] as const) {
  describe(`credit holds in ${name}`, () => {
    test("admitted while balance is left after the holds; refusals say why; release is idempotent", async () => {
      const b = await make();
      try {
        const [h] = b.stores(1);
        await b.account("acme", 1_000);
        expect(await h!.admit({ requestId: "a", accountId: "acme", micros: 600, tokens: 0 }, money)).toBeNull();
        expect(await h!.admit({ requestId: "b", accountId: "acme", micros: 600, tokens: 0 }, money)).toBeNull(); // 400 left: admitted, may end at −200
        expect(await h!.admit({ requestId: "c", accountId: "acme", micros: 1, tokens: 0 }, money)).toEqual({ reason: "balance", balance: 1_000, held: 1_200 });
        expect(await h!.held("acme")).toEqual({ micros: 1_200, tokens: 0 });
        await h!.release("a");
        await h!.release("a");
        expect(await h!.held("acme")).toEqual({ micros: 600, tokens: 0 });
        expect(await h!.admit({ requestId: "c", accountId: "acme", micros: 1, tokens: 0 }, money)).toBeNull();
        expect(await h!.admit({ requestId: "x", accountId: "nobody", micros: 1, tokens: 0 }, money)).toEqual({ reason: "unknown_account" });
        await b.account("free", 0, 900);
        const trial = { money: false, trialLimit: 1_000 };
        expect(await h!.admit({ requestId: "t1", accountId: "free", micros: 0, tokens: 500 }, trial)).toBeNull();
        expect(await h!.admit({ requestId: "t2", accountId: "free", micros: 0, tokens: 1 }, trial)).toEqual({ reason: "trial" });
      } finally {
        await b.close();
      }
    }, 30_000);

    test("300 admissions of 100 µ$ against 10,000 µ$ from three processes at once: exactly 100 admitted", async () => {
      const b = await make();
      try {
        const stores = b.stores(3);
        await b.account("busy", 10_000);
        const out = await Promise.all(Array.from({ length: 300 }, (_, i) => stores[i % 3]!.admit({ requestId: `r${i}`, accountId: "busy", micros: 100, tokens: 0 }, money)));
        expect(out.filter((r) => r === null)).toHaveLength(100);
        expect(await stores[1]!.held("busy")).toEqual({ micros: 10_000, tokens: 0 });
      } finally {
        await b.close();
      }
    }, 30_000);
  });
}

describe("credit holds in PostgreSQL, across processes", () => {
  test("a settlement spends its hold in its own transaction; a repeat settles nothing and holds nothing", async () => {
    const b = await postgresBackend();
    try {
      const [h] = b.stores(1);
      await b.account("acme", 1_000);
      await b.pools[0]!.money`INSERT INTO api_keys (id, account_id, kind, secret_hash, last4, created_at) VALUES ('key_acme', 'acme', 'premium', ${new Uint8Array([1, 2])}, 'abcd', 1)`;
      expect(await h!.admit({ requestId: "r1", accountId: "acme", micros: 500, tokens: 0 }, money)).toBeNull();
      const ledger = postgresLedger(b.pools[0]!.money);
      const usage = { request_id: "r1", account_id: "acme", key_id: "key_acme", model: "m", endpoint: "/v1/chat/completions", input_tokens: 1, output_tokens: 1, cached_tokens: 0, images: 0, batch: 0, cost_micros: 300, trial_tokens: 0, created_at: 1 };
      const row = await b.pools[0]!.money`SELECT micros FROM credit_holds WHERE request_id = 'slice:proc-0:acme'`;
      expect(Number(row[0].micros)).toBe(500);
      // The charge spends the hold in its own transaction: never the charge without it.
      expect(await ledger.settle([{ row: usage, spend: h!.spendOf!("r1") }])).toEqual([{ charged: true }]);
      expect(Number((await b.pools[0]!.money`SELECT micros FROM credit_holds WHERE request_id = 'slice:proc-0:acme'`)[0].micros)).toBe(0);
      await h!.release("r1", true);
      expect(await h!.held("acme")).toEqual({ micros: 0, tokens: 0 });
      expect(await ledger.balance("acme")).toEqual({ balance_micros: 700, trial_tokens_used: 0 });
      // The same request settled again (a retry): nothing charged, and no hold left behind.
      expect(await ledger.settle([{ row: usage }])).toEqual([{ charged: false }]);
      await h!.release("r1", true);
      expect(await h!.held("acme")).toEqual({ micros: 0, tokens: 0 });
      expect(await ledger.balance("acme")).toEqual({ balance_micros: 700, trial_tokens_used: 0 });
    } finally {
      await b.close();
    }
  }, 30_000);

  test("the holds of a process that stopped beating are dropped by another's heartbeat; a live process's are renewed", async () => {
    const b = await postgresBackend();
    try {
      await b.account("acme", 10_000);
      const dead = postgresHolds(b.pools[0]!.fast, "dead-process", 200);
      const live = postgresHolds(b.pools[0]!.fast, "live-process", 200);
      expect(await dead.admit({ requestId: "d1", accountId: "acme", micros: 4_000, tokens: 0 }, money)).toBeNull();
      expect(await live.admit({ requestId: "l1", accountId: "acme", micros: 3_000, tokens: 0 }, money)).toBeNull();
      for (let i = 0; i < 4; i++) {
        await Bun.sleep(100);
        await live.heartbeat(); // the live process beats; the dead one does not
      }
      expect(await live.held("acme")).toEqual({ micros: 3_000, tokens: 0 });
      const left = await b.pools[0]!.money`SELECT request_id, micros FROM credit_holds`;
      expect(left.map((r: { request_id: string; micros: string }) => [r.request_id, Number(r.micros)])).toEqual([["slice:live-process:acme", 3_000]]);
    } finally {
      await b.close();
    }
  }, 30_000);
  test("admissions racing settlements on three connections never count a settled request in neither the balance nor the holds", async () => {
    // An admission reads the balance and the holds; a settlement charges the balance and deletes
    // its hold in one transaction. Read in two statements, a settlement committing between them
    // was in neither, and the account was admitted past its balance (seen in the three-process
    // appliance test). Each request here settles the moment it is admitted, at exactly its hold.
    const b = await postgresBackend();
    try {
      const COST = 1_000;
      const ROUNDS = 6;
      const stores = b.stores(3);
      await b.pools[0]!.money`INSERT INTO accounts (id, name, created_at) VALUES ('base', 'base', 1)`;
      await b.pools[0]!.money`INSERT INTO api_keys (id, account_id, kind, secret_hash, last4, created_at) VALUES ('key_base', 'base', 'premium', ${new Uint8Array([9])}, 'abcd', 1)`;
      const ledgers = b.pools.map((p) => postgresLedger(p.money));
      for (let round = 0; round < ROUNDS; round++) {
        const acct = `race${round}`;
        await b.account(acct, 150 * COST);
        let n = 0;
        await Promise.all(
          Array.from({ length: 36 }, async (_, w) => {
            for (;;) {
              const requestId = `${acct}-${w}-${n++}`;
              if (await stores[w % 3]!.admit({ requestId, accountId: acct, micros: COST, tokens: 0 }, money)) return;
              const row = { request_id: requestId, account_id: acct, key_id: "key_base", model: "m", endpoint: "/v1/embeddings", input_tokens: 1, output_tokens: 0, cached_tokens: 0, images: 0, batch: 0, cost_micros: COST, trial_tokens: 0, created_at: 1 };
              await ledgers[w % ledgers.length]!.settle([{ row, spend: stores[w % 3]!.spendOf!(requestId) }]);
              await stores[w % 3]!.release(requestId, true);
            }
          }),
        );
        const balance = (await ledgers[0]!.balance(acct))!.balance_micros;
        // Admitted while anything was left, and every hold the size of its charge: exactly spent.
        expect(balance).toBe(0);
      }
    } finally {
      await b.close();
    }
  }, 60_000);
  test("a slice holds spare only far from the end of a balance, and a process cut off past its lease admits nothing more from it", async () => {
    const b = await postgresBackend();
    try {
      await b.account("rich", 10_000_000);
      const cut = postgresHolds(b.pools[0]!.fast, "cut-process", 200);
      const other = postgresHolds(b.pools[0]!.fast, "other-process", 200);
      expect(await cut.admit({ requestId: "c1", accountId: "rich", micros: 1_000, tokens: 0 }, money)).toBeNull();
      const row = async (owner: string) => Number((await b.pools[0]!.money`SELECT COALESCE(SUM(micros), 0) AS m FROM credit_holds WHERE owner = ${owner}`)[0].m);
      expect(await row("cut-process")).toBe(17_000); // the request and spare for 16 more
      // Its next requests come from the spare: nothing more reaches the database.
      for (let i = 2; i <= 5; i++) expect(await cut.admit({ requestId: `c${i}`, accountId: "rich", micros: 1_000, tokens: 0 }, money)).toBeNull();
      expect(await row("cut-process")).toBe(17_000);
      // Cut off: it stops beating, another process drops its row once the lease lapses.
      await Bun.sleep(300);
      await other.heartbeat();
      expect(await row("cut-process")).toBe(0);
      await cut.heartbeat(); // back: it finds its row gone, and its spare with it
      expect(await cut.admit({ requestId: "c6", accountId: "rich", micros: 1_000, tokens: 0 }, money)).toBeNull();
      expect(await row("cut-process")).toBeGreaterThanOrEqual(1_000); // decided in the database again
      // Near the end of a balance there is no spare: each request is decided there.
      await b.account("poor", 5_000);
      expect(await other.admit({ requestId: "p1", accountId: "poor", micros: 1_000, tokens: 0 }, money)).toBeNull();
      expect(Number((await b.pools[0]!.money`SELECT micros FROM credit_holds WHERE request_id = 'slice:other-process:poor'`)[0].micros)).toBe(1_000);
    } finally {
      await b.close();
    }
  }, 30_000);
});
