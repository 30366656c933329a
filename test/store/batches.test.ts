import { afterAll, describe, expect, test } from "bun:test";
import type { Database } from "bun:sqlite";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { sqliteBatchStore, type BatchStore, type LineRow } from "../../src/4-store/batches";
import { openDatabase } from "../../src/4-store/db";
import { sqliteLedger, type Ledger, type LedgerEffect } from "../../src/4-store/ledger";
import { postgresBatchStore } from "../../src/4-store/pg/batches";
import { connectPostgres, migratePostgres, type PgPools } from "../../src/4-store/pg/db";
import { postgresLedger } from "../../src/4-store/pg/ledger";
import { tempDir } from "../helpers/app";
import { freshDatabase } from "../helpers/postgres";

// Issue 44: the batch store (src/4-store/batches.ts) on a real SQLite file and on PostgreSQL, one
// suite: line claims are leases — never one line to two claimers, three claiming at once included;
// an expired lease is claimed again with its start counted; a renewed one is not; a hand-back takes
// the start back. A line ends once (finished or failed twice counts once; the ledger's batch_line
// effect gates a charge on it), cancel and expiry fail only lines no lease holds, and a batch begins
// and ends once, its result files published with its end.

interface Backend {
  /** `n` batch stores on one database, as `n` processes would hold them. */
  stores(n: number): BatchStore[];
  ledger: Ledger;
  /** One statement with `?` parameters. */
  run(sql: string, ...params: unknown[]): Promise<void>;
  rows<T>(sql: string, ...params: unknown[]): Promise<T[]>;
  close(): Promise<void>;
}

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

async function sqliteBackend(): Promise<Backend> {
  const dir = tempDir("appliance-batches-");
  dirs.push(dir);
  const file = join(dir, "store.sqlite");
  const db = openDatabase(file, { synchronous: "normal" });
  const extra: Database[] = [];
  return {
    stores: (n) => Array.from({ length: n }, (_, i) => sqliteBatchStore(i === 0 ? db : (extra[extra.length] = openDatabase(file, { synchronous: "normal" })))),
    ledger: sqliteLedger(db),
    run: async (sql, ...p) => void db.query(sql).run(...(p as never[])),
    rows: async <T,>(sql: string, ...p: unknown[]) => db.query(sql).all(...(p as never[])) as T[],
    close: async () => [db, ...extra].forEach((d) => d.close()),
  };
}

async function postgresBackend(): Promise<Backend> {
  const url = await freshDatabase("batches");
  const main = connectPostgres(url);
  await migratePostgres(main.money);
  const pools: PgPools[] = [main];
  const numbered = (sql: string) => {
    let i = 0;
    return sql.replace(/\?/g, () => `$${++i}`);
  };
  return {
    stores: (n) =>
      Array.from({ length: n }, (_, i) => {
        const p = i === 0 ? main : (pools[pools.length] = connectPostgres(url));
        return postgresBatchStore(p.money, p.fast);
      }),
    ledger: postgresLedger(main.money),
    run: async (sql, ...p) => void (await main.money.unsafe(numbered(sql), p)),
    rows: async <T,>(sql: string, ...p: unknown[]) => (await main.money.unsafe(numbered(sql), p)) as T[],
    close: async () => void (await Promise.all(pools.map((x) => x.close()))),
  };
}

const MIN = 60_000;
let made = 0;

/** An account, a key, an input file and a batch in progress with `n` lines (1..n); its id. */
async function batchOf(b: Backend, store: BatchStore, n: number): Promise<string> {
  const tag = `${++made}`;
  await b.run("INSERT INTO accounts (id, name, balance_micros, created_at) VALUES (?, ?, 1000000, 1)", `acct_${tag}`, `a${tag}`);
  await b.run("INSERT INTO api_keys (id, account_id, kind, secret_hash, last4, created_at) VALUES (?, ?, 'premium', ?, 'abcd', 1)", `key_${tag}`, `acct_${tag}`, new Uint8Array(Buffer.from(`secret ${tag}`)));
  await b.run("INSERT INTO files (id, key_id, account_id, filename, purpose, bytes, created_at) VALUES (?, ?, ?, 'in.jsonl', 'batch', 10, 1)", `file-in${tag}`, `key_${tag}`, `acct_${tag}`);
  const id = `batch_${tag}`;
  await store.insert({ id, key_id: `key_${tag}`, account_id: `acct_${tag}`, endpoint: "/v1/chat/completions", input_file_id: `file-in${tag}`, completion_window: "24h", metadata: null, created_at: 1000 + made, expires_at: Date.now() + 86_400_000 });
  const lines = Array.from({ length: n }, (_, i) => ({ line: i + 1, custom_id: `c${i + 1}`, model: "chat", body: JSON.stringify({ n: i + 1 }) }));
  expect(await store.begin(id, lines, 2000)).toBe(true);
  return id;
}

const numbers = (lines: Pick<LineRow, "line">[]) => lines.map((l) => l.line);

for (const [name, make] of [["SQLite", sqliteBackend], ["PostgreSQL", postgresBackend]] as const) {
  describe(`batch store on ${name}`, () => {
    test("a batch begins once with its lines, and its status moves only from the statuses given", async () => {
      const b = await make();
      try {
        const [s] = b.stores(1);
        const id = await batchOf(b, s!, 3);
        const row = (await s!.byId(id))!;
        expect([row.status, row.total, row.in_progress_at]).toEqual(["in_progress", 3, 2000]);
        expect(await s!.begin(id, [], 3000)).toBe(false); // no longer validating: nothing rewritten
        expect((await s!.line(id, 3))!).toMatchObject({ line: 3, custom_id: "c3", state: "pending", starts: 0, lease_owner: null, lease_until: null });
        expect(await s!.setStatus(id, "cancelling", 4000, {}, ["validating"])).toBe(false);
        expect(await s!.setStatus(id, "cancelling", 4000, {}, ["validating", "in_progress"])).toBe(true);
        expect((await s!.byId(id))!).toMatchObject({ status: "cancelling", cancelling_at: 4000 });
        expect((await s!.open()).map((x) => x.id)).toContain(id);
      } finally {
        await b.close();
      }
    });

    test("claims lease lines in order and count a start; a line another owner holds is never claimed", async () => {
      const b = await make();
      try {
        const [s] = b.stores(1);
        const id = await batchOf(b, s!, 6);
        const a = await s!.claimLines({ batchId: id, owner: "proc-a", limit: 3, leaseMs: MIN });
        expect(numbers(a)).toEqual([1, 2, 3]);
        expect(a.map((l) => [l.starts, l.lease_owner])).toEqual([[1, "proc-a"], [1, "proc-a"], [1, "proc-a"]]);
        expect(a[0]!.lease_until).toBeGreaterThan(Date.now() + MIN / 2);
        expect(numbers(await s!.claimable(id, 10))).toEqual([4, 5, 6]);
        expect(numbers(await s!.claimLines({ batchId: id, owner: "proc-b", limit: 10, leaseMs: MIN }))).toEqual([4, 5, 6]);
        expect(await s!.claimLines({ batchId: id, owner: "proc-c", limit: 10, leaseMs: MIN })).toEqual([]);
      } finally {
        await b.close();
      }
    });

    test("three claimers at once never claim a line twice", async () => {
      const b = await make();
      try {
        const stores = b.stores(3);
        const id = await batchOf(b, stores[0]!, 200);
        const taken = await Promise.all(
          stores.map(async (s, i) => {
            const mine: number[] = [];
            for (;;) {
              const got = await s.claimLines({ batchId: id, owner: `proc-${i}`, limit: 7, leaseMs: MIN });
              if (got.length === 0) return mine;
              mine.push(...numbers(got));
            }
          }),
        );
        const all = taken.flat().sort((x, y) => x - y);
        expect(all).toEqual(Array.from({ length: 200 }, (_, i) => i + 1));
        expect(Number((await b.rows<{ n: number }>("SELECT COUNT(*) AS n FROM batch_lines WHERE batch_id = ? AND starts = 1", id))[0]!.n)).toBe(200);
      } finally {
        await b.close();
      }
    });

    test("an expired lease is claimed again, its start counted again; a renewed one is not", async () => {
      const b = await make();
      try {
        const [s] = b.stores(1);
        const id = await batchOf(b, s!, 4);
        await s!.claimLines({ batchId: id, owner: "alive", limit: 2, leaseMs: MIN }); // lines 1, 2
        await s!.claimLines({ batchId: id, owner: "killed", limit: 1, leaseMs: -1 }); // line 3, its lease already lapsed
        const again = await s!.claimLines({ batchId: id, owner: "other", limit: 10, leaseMs: MIN });
        expect(again.map((l) => [l.line, l.starts, l.lease_owner])).toEqual([[3, 2, "other"], [4, 1, "other"]]);
        // The heartbeat renews what its owner holds, and only that.
        expect(await s!.renew("alive", -1)).toBe(2); // lapsed at once
        expect(await s!.renew("nobody", MIN)).toBe(0);
        expect((await s!.claimLines({ batchId: id, owner: "other", limit: 10, leaseMs: MIN })).map((l) => [l.line, l.starts])).toEqual([[1, 2], [2, 2]]);
        expect(await s!.renew("other", MIN)).toBe(4);
        expect(await s!.claimLines({ batchId: id, owner: "alive", limit: 10, leaseMs: MIN })).toEqual([]);
      } finally {
        await b.close();
      }
    });

    test("a hand-back takes the start back; a let-go keeps it; neither touches another owner's line", async () => {
      const b = await make();
      try {
        const [s] = b.stores(1);
        const id = await batchOf(b, s!, 2);
        await s!.claimLines({ batchId: id, owner: "p", limit: 2, leaseMs: MIN });
        await s!.release(id, 1, "p");
        await s!.release(id, 2, "p", true);
        await s!.release(id, 2, "q"); // not q's
        expect([(await s!.line(id, 1))!, (await s!.line(id, 2))!].map((l) => [l.starts, l.lease_owner, l.lease_until])).toEqual([
          [0, null, null],
          [1, null, null],
        ]);
        const back = await s!.claimable(id, 10);
        expect(back.map((l) => [l.line, l.starts])).toEqual([[1, 0], [2, 1]]); // line 2: a suspect for the next claim
      } finally {
        await b.close();
      }
    });

    test("a line finished or failed twice counts once; an ended line's charge is gated off", async () => {
      const b = await make();
      try {
        const [s] = b.stores(1);
        const id = await batchOf(b, s!, 3);
        const batch = (await s!.byId(id))!;
        expect(await s!.fail(id, 1, '{"failed":1}', 5)).toBe(true);
        expect(await s!.fail(id, 1, '{"failed":"again"}', 6)).toBe(false);
        const effect = (line: number): LedgerEffect => ({ kind: "batch_line", batchId: id, line, result: `{"done":${line}}`, at: 7 });
        const usage = (requestId: string) => ({ request_id: requestId, account_id: batch.account_id, key_id: batch.key_id, model: "chat", endpoint: "/v1/chat/completions", input_tokens: 1, output_tokens: 1, cached_tokens: 0, images: 0, batch: 1, cost_micros: 10, trial_tokens: 0, created_at: 7 });
        expect(await b.ledger.settle([{ row: usage(`req_${id}_2`), effect: effect(2) }])).toEqual([{ charged: true }]);
        expect(await s!.fail(id, 2, '{"failed":2}', 8)).toBe(false); // completed: its failure is not recorded
        expect(await b.ledger.settle([{ row: usage(`req_${id}_1`), effect: effect(1) }])).toEqual([{ ended: true }]); // failed: not charged
        const after = (await s!.byId(id))!;
        expect([after.completed, after.failed]).toEqual([1, 1]);
        expect(await s!.results(id, 0, 10)).toEqual([
          { line: 1, state: "failed", result: '{"failed":1}' },
          { line: 2, state: "completed", result: '{"done":2}' },
        ]);
        expect(await s!.results(id, 1, 10)).toEqual([{ line: 2, state: "completed", result: '{"done":2}' }]);
        expect(Number((await b.rows<{ n: number }>("SELECT COUNT(*) AS n FROM usage WHERE account_id = ?", batch.account_id))[0]!.n)).toBe(1);
      } finally {
        await b.close();
      }
    });

    test("cancel fails only the lines no lease holds, and says how many are still running", async () => {
      const b = await make();
      try {
        const [s] = b.stores(1);
        const id = await batchOf(b, s!, 5);
        await s!.claimLines({ batchId: id, owner: "runner", limit: 2, leaseMs: MIN }); // 1, 2 run
        await s!.claimLines({ batchId: id, owner: "dead", limit: 1, leaseMs: -1 }); // 3: its process is gone
        const out = await s!.failUnleased(id, (l) => JSON.stringify({ cancelled: l.line, custom_id: l.custom_id }), 9);
        expect(out).toEqual({ failed: 3, pending: 2 });
        expect((await s!.results(id, 0, 10)).map((r) => [r.line, r.state, r.result])).toEqual([
          [3, "failed", '{"cancelled":3,"custom_id":"c3"}'],
          [4, "failed", '{"cancelled":4,"custom_id":"c4"}'],
          [5, "failed", '{"cancelled":5,"custom_id":"c5"}'],
        ]);
        expect((await s!.byId(id))!.failed).toBe(3);
        expect(await s!.failUnleased(id, () => "{}", 10)).toEqual({ failed: 0, pending: 2 }); // a second pass changes nothing
        expect(await s!.fail(id, 1, "{}", 11)).toBe(true); // the running lines end their own way
        expect((await s!.failUnleased(id, () => "{}", 12)).pending).toBe(1);
      } finally {
        await b.close();
      }
    });

    test("a batch ends once, its result files published with the end; counts sum lines and statuses", async () => {
      const b = await make();
      try {
        const [s] = b.stores(1);
        const id = await batchOf(b, s!, 2);
        const batch = (await s!.byId(id))!;
        await s!.fail(id, 1, "{}", 5);
        await s!.fail(id, 2, "{}", 5);
        const before = await s!.counts();
        expect(before.byStatus.in_progress).toBeGreaterThanOrEqual(1);
        const file = { id: `file-out-${id}`, key_id: batch.key_id, account_id: batch.account_id, filename: `${id}_error.jsonl`, purpose: "batch_output", bytes: 4, status: "processed", created_at: 6, expires_at: 7 };
        expect(await s!.setStatus(id, "finalizing", 6, {}, ["in_progress"])).toBe(true);
        expect(await s!.end(id, { from: ["finalizing"], to: "completed", now: 8, output: null, errors: file })).toBe(true);
        expect(await s!.end(id, { from: ["finalizing"], to: "completed", now: 9, output: null, errors: { ...file, id: "file-second" } })).toBe(false);
        expect((await s!.byId(id))!).toMatchObject({ status: "completed", completed_at: 8, error_file_id: file.id, output_file_id: null });
        expect((await b.rows<{ id: string }>("SELECT id FROM files WHERE account_id = ? AND purpose = 'batch_output'", batch.account_id)).map((r) => r.id)).toEqual([file.id]);
        const after = await s!.counts();
        expect(after.failed - before.failed).toBe(0); // counted when the lines failed
        expect(after.byStatus.completed! - (before.byStatus.completed ?? 0)).toBe(1);
        expect((await s!.byAccount(batch.account_id, 10)).map((x) => x.id)).toEqual([id]);
        expect((await s!.page(batch.key_id, undefined, 10)).map((x) => x.id)).toEqual([id]);
      } finally {
        await b.close();
      }
    });

    test(name === "SQLite" ? "every lease ends when a worker starts: one process holds the data dir" : "a starting worker leaves other processes' leases alone", async () => {
      const b = await make();
      try {
        const [s] = b.stores(1);
        const id = await batchOf(b, s!, 2);
        await s!.claimLines({ batchId: id, owner: "earlier", limit: 2, leaseMs: MIN });
        const ended = await s!.endDeadLeases();
        const free = await s!.claimable(id, 10);
        if (name === "SQLite") expect([ended, free.map((l) => [l.line, l.starts])]).toEqual([2, [[1, 1], [2, 1]]]);
        else expect([ended, free]).toEqual([0, []]);
      } finally {
        await b.close();
      }
    });
  });
}
