import type { Database } from "bun:sqlite";
import { mkdirSync, readdirSync, renameSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import { newId, randomBase62 } from "../lib/ids";

// Files (spec §2.10, §4): a row of metadata and the file's bytes, by domain operation (issue 44):
// one async interface, the SQLite store here (rows in SQLite, bytes on the data dir's disk under
// files/<id>) and PostgreSQL in pg/files.ts (bytes in the database, in chunks, so that every process
// serves every file). A file is written through a sink before its row exists and is visible only
// once published: a half-written file is never listed nor read, on either backend.

export interface FileRow {
  id: string;
  key_id: string;
  account_id: string;
  filename: string;
  purpose: string;
  bytes: number;
  status: string;
  created_at: number;
  expires_at: number | null;
  deleted_at: number | null;
}

export type NewFile = Omit<FileRow, "deleted_at">;

/** A file being written. Its bytes go to the store as they come; none of it is visible until published. */
export interface FileSink {
  /** The id the file will have once published. */
  readonly id: string;
  /** Bytes written so far. */
  readonly bytes: number;
  /** Appends bytes (one write at a time: await each). */
  write(chunk: Uint8Array): Promise<void>;
  /** Every byte is in the store, unpublished; the file's size. */
  close(): Promise<number>;
  /** Drops what was written (a failed upload, a result not kept); never after the file was published. */
  discard(): Promise<void>;
}

/** Refused: the account's live files (`used` bytes) and this one would pass the quota; nothing published. */
export type PublishOutcome = { ok: true } | { ok: false; used: number };

export interface FileStore {
  /** Where file bytes live on this box's disk (SQLite: <data_dir>/files), or null (PostgreSQL: in the database). */
  readonly localDir: string | null;
  /** A live file (neither deleted nor swept); null otherwise. */
  byId(id: string): Promise<FileRow | null>;
  /** The key's live files, newest first; `after` is the id of the last file of the previous page. */
  page(keyId: string, opts: { purpose?: string; after?: string; limit: number }): Promise<FileRow[]>;
  /** Bytes of the account's live files: neither deleted nor past their expiry (the sweeper may not have run yet). */
  usedBytes(accountId: string, now: number): Promise<number>;
  /** Starts a new file. */
  create(): Promise<FileSink>;
  /**
   * Makes a closed sink's file visible as `row` (row.id is the sink's id). With `quotaBytes`, only
   * if the account's live files and this one fit in it, checked and written in one step.
   */
  publish(row: NewFile, quotaBytes?: number): Promise<PublishOutcome>;
  /** A live file's bytes, read a piece at a time (never the whole file in memory); null when there is no such file. */
  contents(id: string): Promise<Blob | ReadableStream<Uint8Array> | null>;
  /** Deletes a live file: its row is marked, its bytes go. False when there was none. */
  remove(id: string, now: number): Promise<boolean>;
  /** Deletes the files past their expiry and the bytes of files never published (older than a day); how many files expired. */
  sweep(now: number): Promise<number>;
}

const DAY = 86_400_000;

/** The rows' queries, synchronous (bun:sqlite). */
export function filesRepo(db: Database) {
  const insert = db.query(
    `INSERT INTO files (id, key_id, account_id, filename, purpose, bytes, status, created_at, expires_at)
     VALUES ($id, $key_id, $account_id, $filename, $purpose, $bytes, $status, $created_at, $expires_at)`,
  );
  const byId = db.query<FileRow, [string]>("SELECT * FROM files WHERE id = ? AND deleted_at IS NULL");
  const page = db.query<FileRow, { key: string; purpose: string | null; at: number; row: number; limit: number }>(
    `SELECT * FROM files WHERE key_id = $key AND deleted_at IS NULL AND ($purpose IS NULL OR purpose = $purpose)
       AND (created_at, rowid) < ($at, $row) ORDER BY created_at DESC, rowid DESC LIMIT $limit`,
  );
  const cursor = db.query<{ at: number; row: number }, [string]>("SELECT created_at AS at, rowid AS row FROM files WHERE id = ?");
  const markDeleted = db.query("UPDATE files SET deleted_at = $at WHERE id = $id AND deleted_at IS NULL");
  const expired = db.query<FileRow, [number]>("SELECT * FROM files WHERE deleted_at IS NULL AND expires_at IS NOT NULL AND expires_at <= ?");
  const allIds = db.query<{ id: string }, []>("SELECT id FROM files WHERE deleted_at IS NULL");
  const used = db.query<{ bytes: number }, { account: string; now: number }>(
    `SELECT COALESCE(SUM(bytes), 0) AS bytes FROM files INDEXED BY files_account_live
     WHERE account_id = $account AND deleted_at IS NULL AND (expires_at IS NULL OR expires_at > $now)`,
  );

  return {
    insert: (row: NewFile) => void insert.run(row),
    byId: (id: string) => byId.get(id),
    /** The key's files, newest first; `after` is the id of the last file of the previous page. */
    page(key: string, opts: { purpose?: string; after?: string; limit: number }): FileRow[] {
      const end = { at: Number.MAX_SAFE_INTEGER, row: Number.MAX_SAFE_INTEGER };
      const c = opts.after ? (cursor.get(opts.after) ?? end) : end;
      return page.all({ key, purpose: opts.purpose ?? null, at: c.at, row: c.row, limit: opts.limit });
    },
    markDeleted: (id: string, at: number) => markDeleted.run({ id, at }).changes > 0,
    expired: (now: number) => expired.all(now),
    liveIds: () => new Set(allIds.all().map((r) => r.id)),
    /** Bytes of the account's live files: neither deleted nor past their expiry (the sweeper may not have run yet). */
    usedBytes: (account: string, now: number) => used.get({ account, now })!.bytes,
  };
}
export type FilesRepo = ReturnType<typeof filesRepo>;

/**
 * The SQLite store's files: rows in SQLite, bytes in `dir` (<data_dir>/files). A sink writes to
 * tmp-<random> and renames it to <id> when closed; the row is written after (a crash in between
 * leaves a file with no row, which the sweeper removes). One process owns a data dir, so the ids
 * closed here and not yet published are known in memory, and the sweeper leaves them alone.
 */
export function sqliteFileStore(db: Database, dir: string): FileStore {
  const files = filesRepo(db);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const pathOf = (id: string) => join(dir, id);
  /** Closed, not known to be published: not orphans. */
  const unpublished = new Set<string>();
  const insertChecked = db.transaction((row: NewFile, quota: number | undefined): PublishOutcome => {
    if (quota !== undefined) {
      const used = files.usedBytes(row.account_id, row.created_at);
      if (used + row.bytes > quota) return { ok: false, used };
    }
    files.insert(row);
    return { ok: true };
  });

  return {
    localDir: dir,
    byId: async (id) => files.byId(id) ?? null,
    page: async (key, opts) => files.page(key, opts),
    usedBytes: async (account, now) => files.usedBytes(account, now),

    async create() {
      const id = newId("file-");
      const tmp = join(dir, `tmp-${randomBase62(12)}`);
      const sink = Bun.file(tmp).writer({ highWaterMark: 1024 * 1024 });
      let bytes = 0;
      let open = true;
      return {
        id,
        get bytes() {
          return bytes;
        },
        async write(chunk) {
          bytes += chunk.length;
          sink.write(chunk);
          await sink.flush();
        },
        async close() {
          open = false;
          await sink.end();
          renameSync(tmp, pathOf(id));
          unpublished.add(id);
          return bytes;
        },
        async discard() {
          if (open) {
            open = false;
            await Promise.resolve(sink.end()).catch(() => {});
          }
          rmSync(tmp, { force: true });
          rmSync(pathOf(id), { force: true });
          unpublished.delete(id);
        },
      };
    },

    async publish(row, quotaBytes) {
      const out = insertChecked.immediate(row, quotaBytes);
      if (out.ok) unpublished.delete(row.id);
      return out;
    },

    async contents(id) {
      return files.byId(id) ? Bun.file(pathOf(id)) : null;
    },

    async remove(id, now) {
      if (!files.markDeleted(id, now)) return false;
      rmSync(pathOf(id), { force: true });
      return true;
    },

    async sweep(now) {
      let removed = 0;
      for (const row of files.expired(now)) {
        files.markDeleted(row.id, now);
        rmSync(pathOf(row.id), { force: true });
        removed++;
      }
      const live = files.liveIds();
      for (const name of readdirSync(dir)) {
        if (live.has(name)) {
          unpublished.delete(name); // published by a batch's end (src/4-store/batches.ts)
          continue;
        }
        const stale = name.startsWith("tmp-") ? now - statSync(join(dir, name)).mtimeMs > DAY : !unpublished.has(name);
        if (stale) rmSync(join(dir, name), { force: true });
      }
      return removed;
    },
  };
}
