import type { Database } from "bun:sqlite";
import type { Config } from "../lib/config";
import { openStore, StoreError } from "./db";
import { sqliteAccountStore, type AccountStore } from "./accounts";
import { sqliteSessionStore, type SessionStore } from "./sessions";
import { postgresAccountStore } from "./pg/accounts";
import { sqliteBatchStore, type BatchStore } from "./batches";
import { sqliteFileStore, type FileStore } from "./files";
import { postgresBatchStore } from "./pg/batches";
import { connectPostgres, migratePostgres, type PgPools } from "./pg/db";
import { postgresFileStore } from "./pg/files";
import { postgresUsageReports } from "./pg/reports";
import { postgresNodeStore } from "./pg/nodes";
import { postgresRentalStore } from "./pg/rentals";
import type { NodeStore } from "./nodes";
import { postgresSessionStore } from "./pg/sessions";
import { postgresThreadStore } from "./pg/threads";
import { sqliteThreadStore, type ThreadStore } from "./threads";
import { sqliteConversationStore, type ConversationStore } from "./conversations";
import { postgresConversationStore } from "./pg/conversations";
import { sqliteRentalStore, type RentalStore } from "./rentals";
import { sqliteUsageReports, type UsageReports } from "./reports";

// The store the appliance runs on (issue 44): SQLite in the data dir (the embedded default, one
// process) or PostgreSQL (`[store] url`, several processes on one database). Each domain has an
// interface of its own in this folder (threads.ts, ledger.ts, holds.ts, counters.ts, …) with a
// SQLite implementation beside it and a PostgreSQL one under pg/; `…StoreOf(store)` picks one.

export interface SqliteStore {
  kind: "sqlite";
  db: Database;
  /** Where it is, for logs and doctor (no secrets). */
  describe: string;
  close(): Promise<void>;
}

export interface PostgresStore {
  kind: "postgres";
  pg: PgPools;
  describe: string;
  close(): Promise<void>;
}

export type Store = SqliteStore | PostgresStore;

export function sqliteStore(db: Database, describe = db.filename): SqliteStore {
  return { kind: "sqlite", db, describe, close: async () => db.close() };
}

/** A URL with its password replaced: what logs, errors and doctor print. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = "***";
    return u.toString();
  } catch {
    return "(unparsable URL)";
  }
}

/** Connects and applies the migrations the database lacks (under the migration lock). */
export async function openPostgresStore(url: string, o: { max?: number; migrate?: boolean } = {}): Promise<PostgresStore> {
  const pg = connectPostgres(url, { max: o.max });
  try {
    // Connects (the pools are lazy): a wrong host, user or password fails here, named.
    if (o.migrate !== false) await migratePostgres(pg.money);
    else await pg.money`SELECT 1`;
  } catch (e) {
    await pg.close().catch(() => {});
    if (e instanceof StoreError) throw e;
    throw new StoreError(`the PostgreSQL store at ${redactUrl(url)} cannot be used: ${(e as Error).message.replaceAll(url, redactUrl(url))}`);
  }
  return { kind: "postgres", pg, describe: redactUrl(url), close: () => pg.close() };
}

/** The configured store: `[store] url` (or APPLIANCE_STORE_URL) names PostgreSQL; absent, SQLite in the data dir. */
export async function openConfiguredStore(config: Pick<Config, "store" | "server">): Promise<Store> {
  if (config.store.url) return openPostgresStore(config.store.url);
  return sqliteStore(openStore(config.server.data_dir));
}

/** Accepts what callers built before the store had two backends: a bare SQLite handle. */
export function asStore(s: Store | Database): Store {
  return "kind" in s && (s.kind === "sqlite" || s.kind === "postgres") ? (s as Store) : sqliteStore(s as Database);
}

/** Accounts, credits and keys on this store. */
export function accountStoreOf(store: Store, onError?: (what: string, e: unknown) => void): AccountStore {
  return store.kind === "sqlite" ? sqliteAccountStore(store.db) : postgresAccountStore(store.pg.money, store.pg.fast, onError);
}

/** Console sessions and passwords on this store. */
export function sessionStoreOf(store: Store): SessionStore {
  return store.kind === "sqlite" ? sqliteSessionStore(store.db) : postgresSessionStore(store.pg.money);
}

/** The usage reads of the console and /metrics on this store. */
export function usageReportsOf(store: Store): UsageReports {
  return store.kind === "sqlite" ? sqliteUsageReports(store.db) : postgresUsageReports(store.pg.money);
}

/** Files (rows and bytes) on this store; on SQLite the bytes live under `filesDir` (<data_dir>/files). */
export function filesStoreOf(store: Store, filesDir: string): FileStore {
  return store.kind === "sqlite" ? sqliteFileStore(store.db, filesDir) : postgresFileStore(store.pg.money, store.pg.fast);
}

/** Batches and their lines' leases on this store. */
export function batchesStoreOf(store: Store): BatchStore {
  return store.kind === "sqlite" ? sqliteBatchStore(store.db) : postgresBatchStore(store.pg.money, store.pg.fast);
}

/** GPU rentals (their rows, creations and tick leases) on this store. */
export function rentalsStoreOf(store: Store): RentalStore {
  return store.kind === "sqlite" ? sqliteRentalStore(store.db) : postgresRentalStore(store.pg);
}

/** Message threads of /v1/messages on this store. */
export function threadStoreOf(store: Store): ThreadStore {
  return store.kind === "sqlite" ? sqliteThreadStore(store.db) : postgresThreadStore(store.pg.money);
}

/** The console's chat conversations, per account, on this store. */
export function conversationStoreOf(store: Store): ConversationStore {
  return store.kind === "sqlite" ? sqliteConversationStore(store.db) : postgresConversationStore(store.pg.money);
}

/** The nodes of a cluster: PostgreSQL's table; none on SQLite (one node). */
export function nodeStoreOf(store: Store): NodeStore | null {
  return store.kind === "postgres" ? postgresNodeStore(store.pg.fast) : null;
}
