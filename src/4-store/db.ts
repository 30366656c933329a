import { Database } from "bun:sqlite";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
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

// Ordered migrations; PRAGMA user_version holds how many have been applied.
// Imported as text so they are embedded in the compiled executable.
export const MIGRATIONS: { name: string; sql: string }[] = [
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

export const DB_FILE = "appliance.sqlite";

export class StoreError extends Error {}

export interface StoreOptions {
  /** "full" survives power loss; "normal" survives a killed process. */
  synchronous?: "full" | "normal";
  busyTimeoutMs?: number;
}

export function openStore(dataDir: string, opts: StoreOptions = {}): Database {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  return openDatabase(join(dataDir, DB_FILE), opts);
}

export function openDatabase(path: string, opts: StoreOptions = {}): Database {
  const db = new Database(path, { create: true, strict: true });
  db.exec(`PRAGMA busy_timeout = ${opts.busyTimeoutMs ?? 5000}`);
  db.exec("PRAGMA journal_mode = WAL");
  db.exec(`PRAGMA synchronous = ${opts.synchronous === "normal" ? "NORMAL" : "FULL"}`);
  db.exec("PRAGMA foreign_keys = ON");
  migrate(db);
  return db;
}

export function schemaVersion(db: Database): number {
  return (db.query("PRAGMA user_version").get() as { user_version: number }).user_version;
}

export function migrate(db: Database, migrations = MIGRATIONS): number {
  // BEGIN IMMEDIATE: two processes opening a new file at once must not both migrate.
  const run = db.transaction(() => {
    const current = schemaVersion(db);
    if (current > migrations.length)
      throw new StoreError(
        `the data dir was written by a newer version (schema ${current}; this build knows ${migrations.length})`,
      );
    for (let v = current; v < migrations.length; v++) {
      db.exec(migrations[v]!.sql);
      db.exec(`PRAGMA user_version = ${v + 1}`);
    }
    return migrations.length - current;
  });
  return run.immediate();
}
