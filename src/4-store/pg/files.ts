import type { SQL } from "bun";
import { newId } from "../../lib/ids";
import { DB_NOW_MS as NOW } from "./db";
import type { FileRow, FileSink, FileStore, NewFile, PublishOutcome } from "../files";

// Files on PostgreSQL (the interface and its rules: ../files.ts). The bytes are rows of
// file_chunks (migration 013), CHUNK bytes each but the last, inserted as a sink fills them, before
// the file's row exists: the row, written in its own transaction once every chunk is in, is what
// makes the file visible, so a half-written file is never read. Chunks go through the
// asynchronously committing pool; the row through the synchronous one, whose commit flushes the
// write-ahead log up to it, chunks included (the log is one sequence). A file is read back one
// chunk per query. A quota check and the row it admits are one transaction under an advisory lock
// on the account, so processes uploading for one account at once cannot pass its quota together.

export const CHUNK = 1024 * 1024;
const DAY = 86_400_000;

const INT_FIELDS = ["bytes", "created_at", "expires_at", "deleted_at"] as const;
function fileRow(r: Record<string, unknown>): FileRow {
  const row = { ...r } as Record<string, unknown>;
  for (const f of INT_FIELDS) row[f] = row[f] === null ? null : Number(row[f]);
  return row as unknown as FileRow;
}

export function postgresFileStore(money: SQL, fast: SQL): FileStore {
  async function byId(id: string): Promise<FileRow | null> {
    const [r] = await fast`SELECT * FROM files WHERE id = ${id} AND deleted_at IS NULL`;
    return r ? fileRow(r) : null;
  }

  async function usedBytes(q: SQL, account: string, now: number): Promise<number> {
    const [r] = await q`SELECT COALESCE(SUM(bytes), 0) AS bytes FROM files WHERE account_id = ${account} AND deleted_at IS NULL AND (expires_at IS NULL OR expires_at > ${now})`;
    return Number(r.bytes);
  }

  return {
    localDir: null,
    byId,

    async page(key, opts) {
      const c = opts.after ? (await fast`SELECT created_at, id FROM files WHERE id = ${opts.after}`)[0] : undefined;
      const purpose = opts.purpose ?? null;
      const rows = c
        ? await fast`SELECT * FROM files WHERE key_id = ${key} AND deleted_at IS NULL AND (${purpose}::text IS NULL OR purpose = ${purpose})
            AND (created_at, id) < (${Number(c.created_at)}, ${c.id}) ORDER BY created_at DESC, id DESC LIMIT ${opts.limit}`
        : await fast`SELECT * FROM files WHERE key_id = ${key} AND deleted_at IS NULL AND (${purpose}::text IS NULL OR purpose = ${purpose})
            ORDER BY created_at DESC, id DESC LIMIT ${opts.limit}`;
      return rows.map(fileRow);
    },

    usedBytes: (account, now) => usedBytes(fast, account, now),

    async create(): Promise<FileSink> {
      const id = newId("file-");
      let bytes = 0;
      let seq = 0;
      /** Bytes not yet in a chunk row (less than CHUNK). */
      let pending: Uint8Array[] = [];
      let pendingBytes = 0;
      const put = async (data: Uint8Array) => {
        await fast.unsafe(`INSERT INTO file_chunks (file_id, seq, data, created_at) VALUES ($1, $2, $3, ${NOW})`, [id, seq, data]);
        seq++;
      };
      const joined = () => {
        const all = Buffer.concat(pending, pendingBytes);
        pending = [];
        pendingBytes = 0;
        return all;
      };
      return {
        id,
        get bytes() {
          return bytes;
        },
        async write(chunk) {
          bytes += chunk.length;
          pending.push(chunk.slice()); // the caller may reuse its buffer
          pendingBytes += chunk.length;
          if (pendingBytes < CHUNK) return;
          const all = joined();
          let at = 0;
          for (; all.length - at >= CHUNK; at += CHUNK) await put(all.subarray(at, at + CHUNK));
          if (at < all.length) {
            pending = [all.subarray(at)];
            pendingBytes = all.length - at;
          }
        },
        async close() {
          if (pendingBytes > 0) await put(joined());
          return bytes;
        },
        async discard() {
          pending = [];
          pendingBytes = 0;
          await fast`DELETE FROM file_chunks WHERE file_id = ${id}`;
        },
      };
    },

    async publish(row: NewFile, quotaBytes?: number): Promise<PublishOutcome> {
      return money.begin(async (tx) => {
        if (quotaBytes !== undefined) {
          await tx`SELECT pg_advisory_xact_lock(hashtext(${`files:${row.account_id}`}))`;
          const used = await usedBytes(tx, row.account_id, row.created_at);
          if (used + row.bytes > quotaBytes) return { ok: false as const, used };
        }
        await tx`INSERT INTO files (id, key_id, account_id, filename, purpose, bytes, status, created_at, expires_at)
          VALUES (${row.id}, ${row.key_id}, ${row.account_id}, ${row.filename}, ${row.purpose}, ${row.bytes}, ${row.status}, ${row.created_at}, ${row.expires_at})`;
        return { ok: true as const };
      });
    },

    async contents(id) {
      const row = await byId(id);
      if (!row) return null;
      let seq = 0;
      let sent = 0;
      return new ReadableStream<Uint8Array>({
        async pull(controller) {
          if (sent >= row.bytes) return controller.close();
          const [c] = await fast`SELECT data FROM file_chunks WHERE file_id = ${id} AND seq = ${seq}`;
          // deleted while being read: the reader gets an error, never a silently short file
          if (!c) return controller.error(new Error(`file ${id} was deleted while it was read`));
          seq++;
          sent += c.data.length;
          controller.enqueue(new Uint8Array(c.data.buffer, c.data.byteOffset, c.data.length));
        },
      });
    },

    async remove(id, now) {
      return money.begin(async (tx) => {
        const gone = await tx`UPDATE files SET deleted_at = ${now} WHERE id = ${id} AND deleted_at IS NULL RETURNING id`;
        if (gone.length === 0) return false;
        await tx`DELETE FROM file_chunks WHERE file_id = ${id}`;
        return true;
      });
    },

    async sweep(now) {
      const [r] = await money`
        WITH gone AS (UPDATE files SET deleted_at = ${now} WHERE deleted_at IS NULL AND expires_at IS NOT NULL AND expires_at <= ${now} RETURNING id),
        chunks AS (DELETE FROM file_chunks WHERE file_id IN (SELECT id FROM gone))
        SELECT COUNT(*) AS n FROM gone`;
      // Bytes no live row names, written over a day ago: their upload or result died before publishing.
      await fast.unsafe(
        `DELETE FROM file_chunks c WHERE c.created_at < ${NOW} - $1 AND NOT EXISTS (SELECT 1 FROM files f WHERE f.id = c.file_id AND f.deleted_at IS NULL)`,
        [DAY],
      );
      return Number(r.n);
    },
  };
}
