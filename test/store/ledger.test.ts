import { afterAll, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { openDatabase } from "../../src/4-store/db";
import { sqliteLedger, type Ledger, type Settlement } from "../../src/4-store/ledger";
import { connectPostgres, migratePostgres, type PgPools } from "../../src/4-store/pg/db";
import { postgresLedger } from "../../src/4-store/pg/ledger";
import type { UsageRow } from "../../src/4-store/usage";
import { tempDir } from "../helpers/app";
import { freshDatabase } from "../helpers/postgres";

// Issue 44: the ledger interface (src/4-store/ledger.ts) on both backends, one suite: a request id
// is charged once (in one group, across groups, across connections settling at once), a failing
// settlement fails alone, and what commits with a charge (a batch line's result, a rental's billed
// minutes) commits with it or not at all — a batch line that already ended gates its charge off.

interface Backend {
  /** `n` ledgers on one database, as `n` processes would hold them. */
  ledgers(n: number): Ledger[];
  /** One statement with `?` parameters. */
  run(sql: string, ...params: unknown[]): Promise<void>;
  rows<T>(sql: string, ...params: unknown[]): Promise<T[]>;
  close(): Promise<void>;
}

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

async function sqliteBackend(): Promise<Backend> {
  const dir = tempDir("appliance-ledger-");
  dirs.push(dir);
  const file = join(dir, "store.sqlite");
  const db = openDatabase(file);
  const extra: Database[] = [];
  return {
    ledgers: (n) => Array.from({ length: n }, (_, i) => (i === 0 ? sqliteLedger(db) : sqliteLedger((extra[extra.length] = openDatabase(file))))),
    run: async (sql, ...p) => void db.query(sql).run(...(p as never[])),
    rows: async <T,>(sql: string, ...p: unknown[]) => db.query(sql).all(...(p as never[])) as T[],
    close: async () => [db, ...extra].forEach((d) => d.close()),
  };
}

async function postgresBackend(): Promise<Backend> {
  const url = await freshDatabase("ledger");
  const main = connectPostgres(url);
  await migratePostgres(main.money);
  const pools: PgPools[] = [main];
  const numbered = (sql: string) => {
    let i = 0;
    return sql.replace(/\?/g, () => `$${++i}`);
  };
  return {
    ledgers: (n) => Array.from({ length: n }, (_, i) => postgresLedger((i === 0 ? main : (pools[pools.length] = connectPostgres(url))).money)),
    run: async (sql, ...p) => void (await main.money.unsafe(numbered(sql), p)),
    rows: async <T,>(sql: string, ...p: unknown[]) => (await main.money.unsafe(numbered(sql), p)) as T[],
    close: async () => void (await Promise.all(pools.map((x) => x.close()))),
  };
}

const row = (id: string, account: string, cost: number, o: Partial<UsageRow> = {}): UsageRow => ({
  request_id: id,
  account_id: account,
  key_id: `key_${account}`,
  model: "m",
  endpoint: "/v1/chat/completions",
  input_tokens: 10,
  output_tokens: 5,
  cached_tokens: 0,
  images: 0,
  batch: 0,
  cost_micros: cost,
  trial_tokens: 0,
  created_at: 1,
  ...o,
});

async function account(b: Backend, name: string, credit: number) {
  await b.run("INSERT INTO accounts (id, name, balance_micros, created_at) VALUES (?, ?, ?, 1)", name, name, credit);
  await b.run("INSERT INTO api_keys (id, account_id, kind, secret_hash, last4, created_at) VALUES (?, ?, 'premium', ?, 'abcd', 1)", `key_${name}`, name, new Uint8Array(Buffer.from(`hash-${name}`)));
}

const balanceOf = async (b: Backend, name: string) => Number((await b.rows<{ b: number }>("SELECT balance_micros AS b FROM accounts WHERE id = ?", name))[0]!.b);

for (const [name, make] of [["SQLite", sqliteBackend], ["PostgreSQL", postgresBackend]] as const) {
  describe(`the ledger on ${name}`, () => {
    test("a request id is charged once, in one group and across groups; trial tokens count; balances and totals read back", async () => {
      const b = await make();
      try {
        const [ledger] = b.ledgers(1);
        await account(b, "acme", 1_000_000);
        const out = await ledger!.settle([{ row: row("r1", "acme", 300) }, { row: row("r1", "acme", 300) }, { row: row("r2", "acme", 0, { trial_tokens: 15 }) }]);
        expect(out).toEqual([{ charged: true }, { charged: false }, { charged: true }]);
        expect(await ledger!.settle([{ row: row("r1", "acme", 300) }])).toEqual([{ charged: false }]);
        expect(await ledger!.balance("acme")).toEqual({ balance_micros: 999_700, trial_tokens_used: 15 });
        expect(await ledger!.balance("nobody")).toBeNull();
        expect(await ledger!.totals("acme")).toEqual({ cost: 300, trial: 15, n: 2 });
        expect(await ledger!.byRequest("r1")).toMatchObject({ request_id: "r1", cost_micros: 300, input_tokens: 10, created_at: 1 });
        expect(await ledger!.byRequest("r9")).toBeNull();
      } finally {
        await b.close();
      }
    }, 30_000);

    test("a failing settlement fails alone: the rest of its group is charged", async () => {
      const b = await make();
      try {
        const [ledger] = b.ledgers(1);
        await account(b, "acme", 1_000);
        const out = await ledger!.settle([{ row: row("ok1", "acme", 10) }, { row: row("bad", "ghost", 10) }, { row: row("ok2", "acme", 10) }]);
        expect(out[0]).toEqual({ charged: true });
        expect("error" in out[1]!).toBe(true);
        expect(out[2]).toEqual({ charged: true });
        expect(await balanceOf(b, "acme")).toBe(980);
        expect(await ledger!.byRequest("bad")).toBeNull();
      } finally {
        await b.close();
      }
    }, 30_000);

    test("a batch line's result commits with its charge; a line that already ended gates the charge off", async () => {
      const b = await make();
      try {
        const [ledger] = b.ledgers(1);
        await account(b, "acme", 1_000);
        await b.run("INSERT INTO files (id, key_id, account_id, filename, purpose, bytes, created_at) VALUES ('file_1', 'key_acme', 'acme', 'in.jsonl', 'batch', 10, 1)");
        await b.run("INSERT INTO batches (id, key_id, account_id, endpoint, input_file_id, completion_window, status, total, created_at, expires_at) VALUES ('batch_1', 'key_acme', 'acme', '/v1/chat/completions', 'file_1', '24h', 'in_progress', 2, 1, 2)");
        for (const [line, state] of [[0, "pending"], [1, "failed"]] as const)
          await b.run("INSERT INTO batch_lines (batch_id, line, custom_id, model, body, state) VALUES ('batch_1', ?, ?, 'm', '{}', ?)", line, `c${line}`, state);
        const effect = (line: number): Settlement["effect"] => ({ kind: "batch_line", batchId: "batch_1", line, result: `{"line":${line}}`, at: 5 });
        const out = await ledger!.settle([{ row: row("req_0", "acme", 100, { batch: 1 }), effect: effect(0) }, { row: row("req_1", "acme", 100, { batch: 1 }), effect: effect(1) }]);
        expect(out).toEqual([{ charged: true }, { ended: true }]);
        expect(await b.rows("SELECT line, state, result FROM batch_lines ORDER BY line")).toEqual([
          { line: 0, state: "completed", result: '{"line":0}' },
          { line: 1, state: "failed", result: null },
        ].map((r) => ({ ...r, line: name === "PostgreSQL" ? String(r.line) : r.line })) as never);
        expect(Number((await b.rows<{ c: number }>("SELECT completed AS c FROM batches WHERE id = 'batch_1'"))[0]!.c)).toBe(1);
        expect(await balanceOf(b, "acme")).toBe(900);
        expect(await ledger!.byRequest("req_1")).toBeNull();
        // The same line settled again (a retry after a crash): charged nothing, recorded nothing.
        expect(await ledger!.settle([{ row: row("req_0", "acme", 100, { batch: 1 }), effect: effect(0) }])).toEqual([{ charged: false }]);
        expect(Number((await b.rows<{ c: number }>("SELECT completed AS c FROM batches WHERE id = 'batch_1'"))[0]!.c)).toBe(1);
      } finally {
        await b.close();
      }
    }, 30_000);

    test("a rental's billed minutes commit with their charge, once, and only from the minutes it had billed", async () => {
      const b = await make();
      try {
        const [ledger] = b.ledgers(1);
        await account(b, "acme", 1_000_000);
        await b.run("INSERT INTO rentals (id, key_id, account_id, node_id, type, status, price_per_hour_micros, token, launcher, created_at) VALUES ('rent_1', 'key_acme', 'acme', 'n1', 'jupyter', 'running', 600000, 't', 'process', 1)");
        const minutes = (from: number, upTo: number, cost: number): Settlement => ({ row: row(`rent_1:m${upTo}`, "acme", cost), effect: { kind: "rental_minutes", rentalId: "rent_1", from, upTo, costMicros: cost } });
        expect(await ledger!.settle([minutes(0, 1, 10_000)])).toEqual([{ charged: true }]);
        expect(await ledger!.settle([minutes(1, 3, 20_000), minutes(0, 1, 10_000)])).toEqual([{ charged: true }, { charged: false }]);
        // Minutes computed from a stale count (another path billed meanwhile): gated off, nothing charged.
        expect(await ledger!.settle([minutes(1, 4, 30_000)])).toEqual([{ ended: true }]);
        expect(await ledger!.byRequest("rent_1:m4")).toBeNull();
        const [r] = await b.rows<{ m: number; c: number }>("SELECT billed_minutes AS m, cost_micros AS c FROM rentals WHERE id = 'rent_1'");
        expect([Number(r!.m), Number(r!.c)]).toEqual([3, 30_000]);
        expect(await balanceOf(b, "acme")).toBe(970_000);
      } finally {
        await b.close();
      }
    }, 30_000);

    test("three connections settling 300 settlements of 100 request ids at once: each id charged once, balances exact to the µ$", async () => {
      const b = await make();
      try {
        const ledgers = b.ledgers(3);
        const names = ["a1", "a2", "a3"];
        for (const n of names) await account(b, n, 10_000_000);
        const cost = (i: number) => 1_000 + i * 7;
        const all: Settlement[] = [];
        for (let copy = 0; copy < 3; copy++) for (let i = 0; i < 100; i++) all.push({ row: row(`req_${i}`, names[i % 3]!, cost(i)) });
        all.sort(() => Math.random() - 0.5);
        // Groups of 1 to 12, each through one of the three ledgers, all in flight together.
        const groups: Promise<unknown>[] = [];
        for (let at = 0, g = 0; at < all.length; g++) {
          const size = 1 + (g % 12);
          groups.push(ledgers[g % 3]!.settle(all.slice(at, at + size)));
          at += size;
        }
        const outcomes = (await Promise.all(groups)).flat() as { charged?: boolean }[];
        expect(outcomes.filter((o) => o.charged === true)).toHaveLength(100);
        expect(outcomes.filter((o) => o.charged === false)).toHaveLength(200);
        expect(Number((await b.rows<{ n: number }>("SELECT COUNT(*) AS n FROM usage"))[0]!.n)).toBe(100);
        for (const [k, n] of names.entries()) {
          const spent = Array.from({ length: 100 }, (_, i) => i).filter((i) => i % 3 === k).reduce((s, i) => s + cost(i), 0);
          expect(await balanceOf(b, n)).toBe(10_000_000 - spent);
        }
      } finally {
        await b.close();
      }
    }, 60_000);
  });
}
