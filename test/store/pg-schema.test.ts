import { afterAll, expect, test } from "bun:test";
import { SQL } from "bun";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { MIGRATIONS, openDatabase, StoreError } from "../../src/4-store/db";
import { connectPostgres, migratePostgres, PG_MIGRATIONS, pgSchemaVersion } from "../../src/4-store/pg/db";
import { tempDir } from "../helpers/app";
import { freshDatabase } from "../helpers/postgres";

// Issue 44: the store's migrations come in pairs (SQLite, PostgreSQL). After all of them, both
// databases have the same tables, the same columns of the same kinds, and the same named indexes
// (but for what the SQLite store keeps in memory: PG_ONLY_TABLES);
// PostgreSQL's are applied once under a lock by any number of processes starting together, and a
// database written by a newer build is refused.

const dir = tempDir("appliance-schema-");
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Tables only PostgreSQL has: what the SQLite store keeps in its one process's memory (src/4-store/holds.ts). */
const PG_ONLY_TABLES = ["cluster_nodes", "counted_leases", "credit_holds", "file_chunks", "key_changes", "rate_events", "signin_buckets"];
const PG_ONLY_INDEXES = ["counted_leases_expiry", "counted_leases_key", "counted_leases_owner", "credit_holds_account", "credit_holds_expiry", "credit_holds_owner", "rate_events_key_at"];

const KIND: Record<string, string> = { integer: "int", bigint: "int", text: "text", blob: "blob", bytea: "blob", real: "real", "double precision": "real" };

function sqliteSchema() {
  const db = openDatabase(join(dir, "schema.sqlite"));
  const tables = db.query<{ name: string }, []>("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name").all();
  const columns = Object.fromEntries(
    tables.map(({ name }) => [name, db.query<{ name: string; type: string }, []>(`PRAGMA table_info(${name})`).all().map((c) => `${c.name}:${KIND[c.type.toLowerCase()] ?? c.type}`).sort()]),
  );
  const indexes = db.query<{ name: string }, []>("SELECT name FROM sqlite_master WHERE type = 'index' AND name NOT LIKE 'sqlite_autoindex%' ORDER BY name").all().map((r) => r.name);
  db.close();
  return { columns, indexes };
}

async function postgresSchema(sql: SQL) {
  const rows = await sql`SELECT table_name, column_name, data_type FROM information_schema.columns WHERE table_schema = 'public' AND table_name <> 'appliance_schema'`;
  const columns: Record<string, string[]> = {};
  for (const r of rows) (columns[r.table_name] ??= []).push(`${r.column_name}:${KIND[r.data_type] ?? r.data_type}`);
  for (const c of Object.values(columns)) c.sort();
  // Named indexes only: PostgreSQL names its primary-key and UNIQUE-constraint ones itself (SQLite's are autoindexes).
  const idx = await sql`SELECT indexname FROM pg_indexes WHERE schemaname = 'public' AND indexname NOT IN (SELECT conname FROM pg_constraint) ORDER BY indexname`;
  return { columns: Object.fromEntries(Object.entries(columns).sort(([a], [b]) => a.localeCompare(b))), indexes: idx.map((r: { indexname: string }) => r.indexname).sort() };
}

test("the pairs: the same migration names, and after them the same tables, columns and indexes on both", async () => {
  expect(PG_MIGRATIONS.map((m) => m.name)).toEqual(MIGRATIONS.map((m) => m.name));
  const pg = connectPostgres(await freshDatabase());
  try {
    expect(await migratePostgres(pg.money)).toBe(PG_MIGRATIONS.length);
    const [a, b] = [sqliteSchema(), await postgresSchema(pg.money)];
    expect(Object.keys(a.columns).length).toBeGreaterThan(10);
    expect(Object.keys(b.columns).filter((t) => !(t in a.columns))).toEqual(PG_ONLY_TABLES);
    for (const t of PG_ONLY_TABLES) delete b.columns[t];
    expect(b.columns).toEqual(a.columns);
    expect(b.indexes.filter((i: string) => !PG_ONLY_INDEXES.includes(i))).toEqual([...a.indexes].sort());
  } finally {
    await pg.close();
  }
}, 30_000);

test("processes starting together migrate once; a second start applies nothing; a newer schema is refused", async () => {
  const url = await freshDatabase();
  const pools = [connectPostgres(url), connectPostgres(url), connectPostgres(url)];
  try {
    const applied = await Promise.all(pools.map((p) => migratePostgres(p.money)));
    expect(applied.sort()).toEqual([0, 0, PG_MIGRATIONS.length]);
    expect(await migratePostgres(pools[0]!.money)).toBe(0);
    expect(await pgSchemaVersion(pools[0]!.money)).toBe(PG_MIGRATIONS.length);
    await pools[0]!.money`UPDATE appliance_schema SET version = ${PG_MIGRATIONS.length + 1}`;
    const refused = await migratePostgres(pools[1]!.money).catch((e) => e);
    expect(refused).toBeInstanceOf(StoreError);
    expect(String(refused.message)).toContain(`schema ${PG_MIGRATIONS.length + 1}; this build knows ${PG_MIGRATIONS.length}`);
  } finally {
    await Promise.all(pools.map((p) => p.close()));
  }
}, 30_000);

test("the asynchronous pool commits with synchronous_commit off; the money pool with it on", async () => {
  const pg = connectPostgres(await freshDatabase());
  try {
    expect((await pg.fast`SHOW synchronous_commit`)[0].synchronous_commit).toBe("off");
    expect((await pg.money`SHOW synchronous_commit`)[0].synchronous_commit).toBe("on");
  } finally {
    await pg.close();
  }
});
