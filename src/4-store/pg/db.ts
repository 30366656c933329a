import { SQL } from "bun";
import { StoreError } from "../db";
import m001 from "./migrations/001-initial.sql" with { type: "text" };
import m002 from "./migrations/002-files-batches.sql" with { type: "text" };
import m003 from "./migrations/003-batch-lines-pending.sql" with { type: "text" };
import m004 from "./migrations/004-rentals.sql" with { type: "text" };
import m005 from "./migrations/005-console.sql" with { type: "text" };
import m006 from "./migrations/006-rental-launch-intent.sql" with { type: "text" };
import m007 from "./migrations/007-batch-line-starts.sql" with { type: "text" };
import m008 from "./migrations/008-files-account-usage.sql" with { type: "text" };
import m009 from "./migrations/009-message-threads.sql" with { type: "text" };
import m010 from "./migrations/010-credit-holds.sql" with { type: "text" };
import m011 from "./migrations/011-counters.sql" with { type: "text" };
import m012 from "./migrations/012-signin-buckets.sql" with { type: "text" };
import m013 from "./migrations/013-file-chunks.sql" with { type: "text" };
import m014 from "./migrations/014-batch-line-leases.sql" with { type: "text" };
import m015 from "./migrations/015-rental-leases.sql" with { type: "text" };
import m016 from "./migrations/016-key-changes.sql" with { type: "text" };
import m017 from "./migrations/017-admit-holds.sql" with { type: "text" };
import m018 from "./migrations/018-counter-calls.sql" with { type: "text" };
import m019 from "./migrations/019-hold-slices.sql" with { type: "text" };
import m020 from "./migrations/020-cluster-nodes.sql" with { type: "text" };
import m021 from "./migrations/021-rental-cluster-node.sql" with { type: "text" };
import m022 from "./migrations/022-console-conversations.sql" with { type: "text" };
import m023 from "./migrations/023-console-keys.sql" with { type: "text" };

// The store on PostgreSQL (issue 44), through Bun's built-in client. Two pools on one database:
// `money` commits synchronously (a charge is durable when its promise resolves), `fast` commits
// asynchronously (holds, counters, heartbeats, leases: losing the last few milliseconds of them in
// a crash of the database is harmless, and each is cheaper than a synchronous commit). Migrations
// come in pairs with SQLite's (migrations/NNN-name.sql and pg/migrations/NNN-name.sql: the same
// tables and columns, a test compares them), applied in one transaction under an advisory lock.

/** The same names, in the same order, as MIGRATIONS in ../db.ts. */
export const PG_MIGRATIONS: { name: string; sql: string }[] = [
  { name: "001-initial", sql: m001 },
  { name: "002-files-batches", sql: m002 },
  { name: "003-batch-lines-pending", sql: m003 },
  { name: "004-rentals", sql: m004 },
  { name: "005-console", sql: m005 },
  { name: "006-rental-launch-intent", sql: m006 },
  { name: "007-batch-line-starts", sql: m007 },
  { name: "008-files-account-usage", sql: m008 },
  { name: "009-message-threads", sql: m009 },
  { name: "010-credit-holds", sql: m010 },
  { name: "011-counters", sql: m011 },
  { name: "012-signin-buckets", sql: m012 },
  { name: "013-file-chunks", sql: m013 },
  { name: "014-batch-line-leases", sql: m014 },
  { name: "015-rental-leases", sql: m015 },
  { name: "016-key-changes", sql: m016 },
  { name: "017-admit-holds", sql: m017 },
  { name: "018-counter-calls", sql: m018 },
  { name: "019-hold-slices", sql: m019 },
  { name: "020-cluster-nodes", sql: m020 },
  { name: "021-rental-cluster-node", sql: m021 },
  { name: "022-console-conversations", sql: m022 },
  { name: "023-console-keys", sql: m023 },
];

/** The database's clock in epoch ms, as SQL: leases and windows are timed by it, whichever process reads them. */
export const DB_NOW_MS = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

/** pg_advisory_xact_lock key of the migrations: "appl" in ASCII. */
const MIGRATION_LOCK = 0x6170706c;

export interface PgPools {
  /** Synchronous commits: money and anything a client is told is done. */
  money: SQL;
  /** Asynchronous commits (synchronous_commit = off): holds, counters, heartbeats, leases. */
  fast: SQL;
  close(): Promise<void>;
}

export function connectPostgres(url: string, o: { max?: number } = {}): PgPools {
  const money = new SQL({ url, max: o.max ?? 8 });
  const fast = new SQL({ url, max: Math.max(2, Math.ceil((o.max ?? 8) / 2)), connection: { synchronous_commit: "off" } });
  return { money, fast, close: async () => void (await Promise.all([money.close(), fast.close()])) };
}

/** The schema version the database holds (0: none yet). */
export async function pgSchemaVersion(sql: SQL): Promise<number> {
  const [t] = await sql`SELECT to_regclass('appliance_schema') IS NOT NULL AS present`;
  if (!t.present) return 0;
  const [row] = await sql`SELECT version FROM appliance_schema WHERE id = 1`;
  return row ? Number(row.version) : 0;
}

/**
 * Applies the migrations this database lacks, in one transaction under an advisory lock (several
 * processes starting at once: one migrates, the others wait and find nothing to do). A database
 * written by a newer build is refused. Returns how many were applied.
 */
export async function migratePostgres(sql: SQL, migrations = PG_MIGRATIONS): Promise<number> {
  return sql.begin(async (tx) => {
    await tx`SELECT pg_advisory_xact_lock(${MIGRATION_LOCK})`;
    await tx`CREATE TABLE IF NOT EXISTS appliance_schema (id INT PRIMARY KEY CHECK (id = 1), version INT NOT NULL)`;
    const [row] = await tx`SELECT version FROM appliance_schema WHERE id = 1`;
    const current = row ? Number(row.version) : 0;
    if (current > migrations.length)
      throw new StoreError(`the database was written by a newer version (schema ${current}; this build knows ${migrations.length})`);
    for (let v = current; v < migrations.length; v++) await tx.unsafe(migrations[v]!.sql);
    await tx`INSERT INTO appliance_schema (id, version) VALUES (1, ${migrations.length}) ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version`;
    return migrations.length - current;
  });
}
