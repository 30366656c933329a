import { existsSync } from "node:fs";
import { join } from "node:path";
import { Database } from "bun:sqlite";
import type { Config } from "../../lib/config";
import { DB_FILE, MIGRATIONS, schemaVersion } from "../../4-store/db";
import { DB_NOW_MS, PG_MIGRATIONS, pgSchemaVersion } from "../../4-store/pg/db";
import { openPostgresStore, redactUrl } from "../../4-store/store";

/** What doctor learns about the configured store (./store.ts judges it). */
export interface StoreFacts {
  kind: "sqlite" | "postgres";
  /** Where (the file, or the URL without its password). */
  at: string;
  /** Why it could not be reached or read; null when it was. */
  error: string | null;
  /** The schema version it holds (0: none yet). */
  schema: number;
  /** The schema version this build writes. */
  known: number;
  /** This machine's clock minus the database's, in ms (PostgreSQL only). */
  skewMs?: number;
}

/** Reads the configured store without changing it: no migration, no file created. */
export async function probeStore(config: Pick<Config, "store" | "server">): Promise<StoreFacts> {
  if (!config.store.url) {
    const at = join(config.server.data_dir, DB_FILE);
    if (!existsSync(at)) return { kind: "sqlite", at, error: null, schema: 0, known: MIGRATIONS.length };
    try {
      const db = new Database(at, { readonly: true });
      try {
        return { kind: "sqlite", at, error: null, schema: schemaVersion(db), known: MIGRATIONS.length };
      } finally {
        db.close();
      }
    } catch (e) {
      return { kind: "sqlite", at, error: (e as Error).message, schema: 0, known: MIGRATIONS.length };
    }
  }
  const at = redactUrl(config.store.url);
  const facts: StoreFacts = { kind: "postgres", at, error: null, schema: 0, known: PG_MIGRATIONS.length };
  try {
    const store = await openPostgresStore(config.store.url, { max: 1, migrate: false });
    try {
      facts.schema = await pgSchemaVersion(store.pg.money);
      // The midpoint of the round trip against the database's clock: the skew, give or take half of it.
      const before = Date.now();
      const [row] = await store.pg.money.unsafe(`SELECT ${DB_NOW_MS} AS now`);
      const after = Date.now();
      facts.skewMs = (before + after) / 2 - Number(row.now);
    } finally {
      await store.close();
    }
  } catch (e) {
    facts.error = (e as Error).message.replace(config.store.url, at);
  }
  return facts;
}
