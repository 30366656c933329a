import type { Database } from "bun:sqlite";

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
    insert: (row: Omit<FileRow, "deleted_at">) => void insert.run(row),
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
