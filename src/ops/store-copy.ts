import type { Database } from "bun:sqlite";
import type { SQL } from "bun";
import { existsSync, openSync, readSync, closeSync, statSync } from "node:fs";
import { join } from "node:path";
import { openStore, StoreError } from "../4-store/db";
import { DB_NOW_MS, pgSchemaVersion } from "../4-store/pg/db";
import { CHUNK } from "../4-store/pg/files";
import { openPostgresStore } from "../4-store/store";

// `appliance store copy --to postgres://…` (issue 44): moves an appliance that ran on SQLite to a
// PostgreSQL database — accounts, keys, credits, balances, usage, sessions, files (their bytes
// too: on PostgreSQL they live in the database), batches, rentals, message threads, the console's
// conversations — in one transaction, so a failed copy leaves the target as empty as it was; an
// empty target only. What lives only while processes run (credit holds, counters, sign-in
// buckets) is not copied: there is none when the source appliance is stopped.

export interface CopyReport {
  tables: { table: string; rows: number }[];
  files: { copied: number; bytes: number; missing: string[] };
  schema: number;
}

/** Tables PostgreSQL has and SQLite has not (process state, and the file bytes copied separately). */
const NOT_COPIED = new Set(["appliance_schema", "file_chunks"]);
const BATCH_ROWS = 500;

export async function copySqliteToPostgres(dataDir: string, url: string, progress: (line: string) => void = () => {}): Promise<CopyReport> {
  const db = openStore(dataDir);
  const target = await openPostgresStore(url);
  try {
    const sql = target.pg.money;
    const tables = await copiedTables(db, sql);
    for (const t of [...tables.map((t) => t.name), "file_chunks"]) {
      const [row] = await sql.unsafe(`SELECT EXISTS (SELECT 1 FROM "${t}") AS any`);
      if (row.any) throw new StoreError(`the target database is not empty (table ${t} has rows): copy into a new, empty database`);
    }
    const report: CopyReport = { tables: [], files: { copied: 0, bytes: 0, missing: [] }, schema: await pgSchemaVersion(sql) };
    await sql.begin(async (tx) => {
      for (const t of tables) {
        const rows = await copyTable(db, tx, t);
        report.tables.push({ table: t.name, rows });
        progress(`${t.name}: ${rows} rows`);
      }
      await resetIdentities(tx, tables.map((t) => t.name));
      report.files = await copyFileBytes(db, tx, join(dataDir, "files"), progress);
    });
    return report;
  } finally {
    db.close();
    await target.close();
  }
}

interface Table {
  name: string;
  columns: string[];
  /** Columns referring to rows of the same table: written in a second pass, once every row exists. */
  selfRefs: string[];
}

/** The tables both stores have, with their shared columns, parents before children. */
async function copiedTables(db: Database, sql: SQL): Promise<Table[]> {
  const sqlite = new Set(db.query<{ name: string }, []>("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'").all().map((r) => r.name));
  const cols = await sql`SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position`;
  const fks = await sql`SELECT c.conrelid::regclass::text AS child, c.confrelid::regclass::text AS parent, a.attname AS col
    FROM pg_constraint c JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
    WHERE c.contype = 'f' AND c.connamespace = current_schema()::regnamespace`;
  const byTable = new Map<string, string[]>();
  for (const { table_name, column_name } of cols) {
    if (NOT_COPIED.has(table_name) || !sqlite.has(table_name)) continue;
    byTable.set(table_name, [...(byTable.get(table_name) ?? []), column_name]);
  }
  for (const [name, pgCols] of byTable) {
    const mine = new Set(db.query<{ name: string }, []>(`PRAGMA table_info("${name}")`).all().map((c) => c.name));
    byTable.set(name, pgCols.filter((c) => mine.has(c)));
  }
  const parents = new Map<string, Set<string>>();
  const selfRefs = new Map<string, string[]>();
  for (const { child, parent, col } of fks) {
    if (child === parent) selfRefs.set(child, [...(selfRefs.get(child) ?? []), col]);
    else parents.set(child, (parents.get(child) ?? new Set()).add(parent));
  }
  const ordered: Table[] = [];
  const placed = new Set<string>();
  const place = (name: string, seen: Set<string>) => {
    if (placed.has(name) || !byTable.has(name)) return;
    if (seen.has(name)) throw new StoreError(`the schema's foreign keys form a cycle through ${name}`);
    seen.add(name);
    for (const p of parents.get(name) ?? []) place(p, seen);
    placed.add(name);
    ordered.push({ name, columns: byTable.get(name)!, selfRefs: selfRefs.get(name) ?? [] });
  };
  for (const name of [...byTable.keys()].sort()) place(name, new Set());
  return ordered;
}

async function copyTable(db: Database, tx: SQL, t: Table): Promise<number> {
  const list = t.columns.map((c) => `"${c}"`).join(", ");
  // Read in key order, a page at a time: by rowid, or by the primary key of a WITHOUT ROWID table.
  const withoutRowid = db.query<{ wr: number }, [string]>("SELECT wr FROM pragma_table_list WHERE name = ?").get(t.name)?.wr === 1;
  const key = withoutRowid
    ? db
        .query<{ name: string; pk: number }, []>(`PRAGMA table_info("${t.name}")`)
        .all()
        .filter((c) => c.pk > 0)
        .sort((a, b) => a.pk - b.pk)
        .map((c) => `"${c.name}"`)
    : ["rowid"];
  const tuple = `(${key.join(", ")})`;
  const cursor = key.map((k, i) => `${k} AS _k${i}`).join(", ");
  const first = db.query<Record<string, unknown>, [number]>(`SELECT ${cursor}, ${list} FROM "${t.name}" ORDER BY ${key.join(", ")} LIMIT ?`);
  const after = db.query<Record<string, any>, any[]>(
    `SELECT ${cursor}, ${list} FROM "${t.name}" WHERE ${tuple} > (${key.map(() => "?").join(", ")}) ORDER BY ${key.join(", ")} LIMIT ?`,
  );
  let last: unknown[] | null = null;
  let n = 0;
  const later: Record<string, unknown>[] = [];
  for (;;) {
    const rows: Record<string, unknown>[] = last ? after.all(...(last as any[]), BATCH_ROWS) : first.all(BATCH_ROWS);
    if (rows.length === 0) break;
    const end = rows[rows.length - 1]!;
    last = key.map((_, i) => end[`_k${i}`]);
    const values = rows.map((r) => {
      const row: Record<string, unknown> = {};
      for (const c of t.columns) row[c] = r[c];
      if (t.selfRefs.some((c) => row[c] !== null)) later.push({ ...row });
      for (const c of t.selfRefs) row[c] = null;
      return row;
    });
    await tx`INSERT INTO ${tx(t.name)} ${tx(values, ...t.columns)}`;
    n += rows.length;
  }
  if (later.length && !t.columns.includes("id")) throw new StoreError(`${t.name} refers to itself but has no id column`);
  for (const r of later) for (const c of t.selfRefs) if (r[c] !== null) await tx.unsafe(`UPDATE "${t.name}" SET "${c}" = $1 WHERE id = $2`, [r[c], r.id]);
  return n;
}

/** Identity columns continue after the copied ids. */
async function resetIdentities(tx: SQL, tables: string[]): Promise<void> {
  const ids = await tx`SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema() AND is_identity = 'YES'`;
  for (const { table_name, column_name } of ids) {
    if (!tables.includes(table_name)) continue;
    await tx.unsafe(`SELECT setval(pg_get_serial_sequence('"${table_name}"', '${column_name}'), COALESCE((SELECT MAX("${column_name}") FROM "${table_name}"), 0) + 1, false)`);
  }
}

/** The bytes of every live file, from <data_dir>/files into file_chunks. */
async function copyFileBytes(db: Database, tx: SQL, dir: string, progress: (line: string) => void): Promise<CopyReport["files"]> {
  const out: CopyReport["files"] = { copied: 0, bytes: 0, missing: [] };
  const live = db.query<{ id: string; bytes: number }, []>("SELECT id, bytes FROM files WHERE deleted_at IS NULL ORDER BY created_at, id").all();
  const buf = Buffer.allocUnsafe(CHUNK);
  for (const f of live) {
    const path = join(dir, f.id);
    if (!existsSync(path) || statSync(path).size !== f.bytes) {
      // A row whose bytes are gone would fail every read: it arrives deleted, and the report names it.
      await tx`UPDATE files SET deleted_at = ${Date.now()} WHERE id = ${f.id}`;
      out.missing.push(f.id);
      continue;
    }
    const fd = openSync(path, "r");
    try {
      // Full chunks but the last, as pg/files.ts writes them (an empty file has none).
      for (let seq = 0, pos = 0; pos < f.bytes; seq++) {
        const n = readSync(fd, buf, 0, Math.min(CHUNK, f.bytes - pos), pos);
        if (n === 0) throw new StoreError(`file ${f.id} ended early on disk`);
        await tx.unsafe(`INSERT INTO file_chunks (file_id, seq, data, created_at) VALUES ($1, $2, $3, ${DB_NOW_MS})`, [f.id, seq, new Uint8Array(buf.subarray(0, n))]);
        pos += n;
      }
    } finally {
      closeSync(fd);
    }
    out.copied++;
    out.bytes += f.bytes;
  }
  progress(`files: ${out.copied} (${out.bytes} bytes)${out.missing.length ? `, ${out.missing.length} missing on disk: ${out.missing.join(", ")}` : ""}`);
  return out;
}
