import { afterAll, expect, test } from "bun:test";
import { SQL } from "bun";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { createAccountService } from "../../src/2-services/accounts/service";
import { createFilesService } from "../../src/2-services/files/service";
import { systemClock } from "../../src/lib/clock";
import { validateConfig } from "../../src/lib/config";
import { memoryLogger } from "../../src/lib/log";
import { sqliteAccountStore } from "../../src/4-store/accounts";
import { openStore } from "../../src/4-store/db";
import { sqliteFileStore } from "../../src/4-store/files";
import { sqliteLedger } from "../../src/4-store/ledger";
import { postgresFileStore } from "../../src/4-store/pg/files";
import { accountStoreOf, openPostgresStore } from "../../src/4-store/store";
import { sqliteConversationStore } from "../../src/4-store/conversations";
import { postgresConversationStore } from "../../src/4-store/pg/conversations";
import { tempDir } from "../helpers/app";
import { cli } from "../helpers/cli";
import { freshDatabase } from "../helpers/postgres";

// Issue 44: `appliance store migrate` on either store, and `appliance store copy --to postgres://…`
// moving a SQLite appliance — accounts, keys, credits and balances, usage, files with their bytes,
// batches, rentals and console conversations — into an empty PostgreSQL, where the same keys work; a non-empty target is
// refused and left as it was.

const dir = tempDir("appliance-store-cli-");
const sqls: SQL[] = [];
afterAll(async () => {
  for (const s of sqls) await s.close();
  rmSync(dir, { recursive: true, force: true });
});

const BIG = Buffer.alloc(2 * 1024 * 1024 + 123, 7); // three chunks in PostgreSQL

async function seed() {
  const db = openStore(dir);
  try {
    const accounts = createAccountService(sqliteAccountStore(db), validateConfig({}).limits, systemClock);
    await accounts.createAccount("team", { creditMicros: 3_000_000 });
    const { key } = await accounts.createKey({ account: "team", kind: "premium", rpm: 9 });
    const old = await accounts.createKey({ account: "team", kind: "premium" });
    const rotated = await accounts.rotateKey(old.info.id); // rotated_from refers to a key of the same table
    const p = (await accounts.authenticate(key))!;
    await sqliteLedger(db).settle([
      { row: { request_id: "req-1", account_id: p.accountId, key_id: p.keyId, model: "m", endpoint: "/v1/embeddings", input_tokens: 5, output_tokens: 0, cached_tokens: 0, images: 0, batch: 0, cost_micros: 250_000, trial_tokens: 0, created_at: 1 } },
    ]);
    const files = createFilesService({ store: sqliteFileStore(db, join(dir, "files")), clock: systemClock, logger: memoryLogger() });
    const input = await files.createResult(p, "in.jsonl", (sink) => sink.write(Buffer.from('{"custom_id":"a"}\n')));
    const big = await files.createResult(p, "big.bin", (sink) => sink.write(BIG));
    const empty = await files.createResult(p, "empty.txt", async () => {});
    db.run(
      "INSERT INTO batches (id, key_id, account_id, endpoint, input_file_id, completion_window, status, total, created_at, expires_at) VALUES ('batch_1', ?, ?, '/v1/embeddings', ?, '24h', 'completed', 1, 1, 2)",
      [p.keyId, p.accountId, input.id],
    );
    db.run("INSERT INTO rentals (id, key_id, account_id, node_id, type, status, price_per_hour_micros, token, launcher, created_at, billed_minutes, cost_micros) VALUES ('rent_1', ?, ?, 'n1', 'jupyter', 'stopped', 600000, 't', 'process', 1, 3, 30000)", [
      p.keyId,
      p.accountId,
    ]);
    const conversations = sqliteConversationStore(db);
    await conversations.create({ id: "conv_1", accountId: p.accountId, title: "Kept", model: "m", settings: { system: "s" }, now: 1 }, 1000);
    await conversations.append({ accountId: p.accountId, id: "conv_1", keep: 0, messages: [{ role: "user", content: "hi ✓" }, { role: "assistant", content: "hello" }], now: 2 }, 1 << 30);
    return { key, rotatedKey: rotated.key, accountId: p.accountId, files: { input, big, empty } };
  } finally {
    db.close();
  }
}

test("store migrate reports the SQLite store's schema, and brings an empty PostgreSQL to this build's", async () => {
  const sqlite = cli(dir, ["store", "migrate", "--json"]);
  expect(sqlite.code).toBe(0);
  expect(sqlite.json()).toMatchObject({ store: "sqlite" });
  const url = await freshDatabase("store_migrate");
  const first = cli(dir, ["store", "migrate", "--json"], { APPLIANCE_STORE_URL: url });
  expect(first.code).toBe(0);
  expect(first.json().applied).toBe(first.json().schema);
  const again = cli(dir, ["store", "migrate"], { APPLIANCE_STORE_URL: url });
  expect(again.stdout).toContain("up to date");
  expect(again.stdout).not.toContain(new URL(url).password || "\u0000");
}, 60_000);

test("store copy moves a SQLite appliance into an empty PostgreSQL: the same keys, balance, usage, files and their bytes, batches and rentals", async () => {
  const seeded = await seed();
  const url = await freshDatabase("store_copy");
  const r = cli(dir, ["store", "copy", "--to", url, "--json"]);
  if (r.code !== 0) throw new Error(r.stderr);
  const report = r.json();
  expect(report.files).toMatchObject({ copied: 3, bytes: BIG.length + 18, missing: [] });
  const rows = Object.fromEntries(report.tables.map((t: { table: string; rows: number }) => [t.table, t.rows]));
  expect(rows).toMatchObject({ accounts: 1, api_keys: 3, credits: 1, usage: 1, files: 3, batches: 1, rentals: 1, console_conversations: 1, console_messages: 2 });

  const store = await openPostgresStore(url);
  try {
    const accounts = createAccountService(accountStoreOf(store), validateConfig({}).limits, systemClock);
    const p = await accounts.authenticate(seeded.key);
    expect(p).toMatchObject({ accountName: "team", rpm: 9 });
    expect(await accounts.authenticate(seeded.rotatedKey)).not.toBeNull();
    expect((await accounts.getAccount("team")).balance_micros).toBe(2_750_000);
    expect((await accounts.listKeys("team")).find((k) => k.rotated_from)?.rotated_from).toMatch(/^key_/);
    accounts.close();
    const files = postgresFileStore(store.pg.money, store.pg.fast);
    for (const [f, bytes] of [
      [seeded.files.big, BIG],
      [seeded.files.input, Buffer.from('{"custom_id":"a"}\n')],
      [seeded.files.empty, Buffer.alloc(0)],
    ] as const) {
      const got = Buffer.from(await new Response(await files.contents(f.id)).arrayBuffer());
      expect(got.equals(bytes)).toBe(true);
    }
    // Identity columns go on after the copied ids: the next usage row is not a duplicate key.
    const [{ id }] = await store.pg.money`INSERT INTO usage (request_id, account_id, key_id, model, endpoint, created_at)
      SELECT 'req-2', account_id, key_id, model, endpoint, 2 FROM usage WHERE request_id = 'req-1' RETURNING id`;
    expect(Number(id)).toBeGreaterThan(1);
    const [rental] = await store.pg.money`SELECT billed_minutes, cost_micros FROM rentals WHERE id = 'rent_1'`;
    expect([Number(rental.billed_minutes), Number(rental.cost_micros)]).toEqual([3, 30_000]);
    // The console's conversations come with their messages, as the account's.
    const kept = await postgresConversationStore(store.pg.money).read(seeded.accountId, "conv_1");
    expect(kept).toMatchObject({ conversation: { title: "Kept", settings: { system: "s" }, messageCount: 2 }, messages: [{ seq: 0, body: { content: "hi ✓" } }, { seq: 1, body: { content: "hello" } }] });
  } finally {
    await store.close();
  }

  // Copying again finds the target in use, and changes nothing there.
  const twice = cli(dir, ["store", "copy", "--to", url]);
  expect(twice.code).not.toBe(0);
  expect(twice.stderr).toContain("not empty");
  const sql = new SQL({ url, max: 1 });
  sqls.push(sql);
  expect(Number((await sql`SELECT COUNT(*) AS n FROM accounts`)[0].n)).toBe(1);
}, 90_000);

test("store copy refuses a URL that is not PostgreSQL's", () => {
  const r = cli(dir, ["store", "copy", "--to", "mysql://x@y/z"]);
  expect(r.code).not.toBe(0);
  expect(r.stderr).toContain("postgres://");
});

test("serve on a PostgreSQL store it cannot reach stops with the reason, the URL's password hidden", () => {
  const r = cli(dir, ["serve", "--port", "0"], { APPLIANCE_STORE_URL: "postgres://appliance:s3cret-pw@127.0.0.1:1/appliance" });
  expect(r.code).not.toBe(0);
  expect(r.stderr).toContain("postgres://appliance:***@127.0.0.1:1/appliance");
  expect(r.stderr + r.stdout).not.toContain("s3cret-pw");
}, 30_000);
