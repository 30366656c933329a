import type { Database } from "bun:sqlite";
import { mkdirSync, readdirSync, renameSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import type { Principal } from "../accounts/types";
import { ApiError } from "../../lib/errors";
import type { Clock } from "../../lib/clock";
import { newId, randomBase62 } from "../../lib/ids";
import type { Logger } from "../../lib/log";
import { filesRepo, type FileRow } from "../../4-store/files";
import { boundaryOf, MultipartError, readMultipart } from "./multipart";
import { createStorageGuard, type StorageLimits } from "./storage";

// Files (spec §2.10, §4): batch inputs uploaded by clients and batch results written by the
// server. Content lives in <data_dir>/files/<id>, streamed to disk; metadata in SQLite. A file
// belongs to the key that created it: other keys, even of the same account, get 404 (spec §5.6).

export const MAX_FILE_BYTES = 50 * 1024 * 1024;
export const RESULT_RETENTION_MS = 30 * 86_400_000;
const PURPOSES = ["batch"];
const DAY = 86_400_000;

/** Who owns a file: the key (and its account). */
export interface Owner {
  keyId: string;
  accountId: string;
}

export interface FileObject {
  id: string;
  object: "file";
  bytes: number;
  created_at: number;
  filename: string;
  purpose: string;
  status: string;
  status_details: null;
  expires_at: number | null;
}

export type FilesService = ReturnType<typeof createFilesService>;

const NO_LIMITS: StorageLimits = { quota_mb: 0, min_free_disk_mb: 0 };

export function createFilesService(deps: {
  db: Database;
  dataDir: string;
  clock: Clock;
  logger: Logger;
  /** [files] quota and free-space floor for uploads (src/2-services/files/storage.ts), read per upload; none when absent. */
  storage?: () => StorageLimits;
}) {
  const files = filesRepo(deps.db);
  const dir = join(deps.dataDir, "files");
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const pathOf = (id: string) => join(dir, id);
  const storage = createStorageGuard({
    dir,
    limits: deps.storage ?? (() => NO_LIMITS),
    usedBytes: (account) => files.usedBytes(account, deps.clock.now()),
  });

  function owned(owner: Owner, id: string): FileRow {
    const row = files.byId(id);
    if (!row || row.key_id !== owner.keyId) throw new ApiError("not_found", `No such File object: ${id}`, { param: "file_id" });
    return row;
  }

  /** Runs `fill` on a temporary path; the caller publishes it, or it is removed on failure. */
  async function receive<T>(fill: (path: string) => Promise<T>): Promise<{ tmp: string; result: T }> {
    const tmp = join(dir, `tmp-${randomBase62(12)}`);
    try {
      return { tmp, result: await fill(tmp) };
    } catch (e) {
      rmSync(tmp, { force: true });
      throw e;
    }
  }

  /** Moves a received file to its name, then records it: a crash in between leaves only an orphan the sweeper removes. */
  function publish(owner: Owner, meta: { filename: string; purpose: string; expiresAt: number | null }, tmp: string, bytes: number): FileObject {
    const id = newId("file-");
    renameSync(tmp, pathOf(id));
    const row = { id, key_id: owner.keyId, account_id: owner.accountId, filename: meta.filename, purpose: meta.purpose, bytes, status: "processed", created_at: deps.clock.now(), expires_at: meta.expiresAt };
    files.insert(row);
    return toObject({ ...row, deleted_at: null });
  }

  return {
    dir,
    pathOf,

    /**
     * POST /v1/files: a multipart body with `file` and `purpose`, streamed to disk, within the
     * account's storage quota and the disk's free-space floor (`contentLength`: the request's, if sent).
     */
    async upload(principal: Principal, body: ReadableStream<Uint8Array> | null, contentType: string | null, contentLength: number | null = null): Promise<FileObject> {
      const boundary = boundaryOf(contentType);
      if (!boundary || !body) throw new ApiError("invalid_request", "the body must be multipart/form-data with a `file` and a `purpose`", { param: "file" });
      const meter = storage.begin(principal.accountId, contentLength);
      try {
        const { tmp, result } = await receive((path) => receiveUpload(body, boundary, path, meter.add));
        const { filename, purpose, bytes } = result;
        try {
          if (!PURPOSES.includes(purpose))
            throw new ApiError("invalid_request", `purpose "${purpose}" is not supported (supported: ${PURPOSES.join(", ")})`, { param: "purpose" });
          meter.finish(bytes);
        } catch (e) {
          rmSync(tmp, { force: true });
          throw e;
        }
        // Nothing is awaited between the last check and the row: no other upload publishes in between.
        return publish(principal, { filename, purpose, expiresAt: null }, tmp, bytes);
      } finally {
        meter.end();
      }
    },

    /** Bytes of the account's live files, as its storage quota counts them. */
    usedBytes: (accountId: string) => files.usedBytes(accountId, deps.clock.now()),

    /**
     * A file the server writes (batch results): kept `RESULT_RETENTION_MS`, then swept. Never refused
     * by the storage quota or floor (a batch's answers are not lost); it counts toward the quota.
     */
    async createResult(owner: Owner, filename: string, fill: (path: string) => Promise<number>): Promise<FileObject> {
      const { tmp, result: bytes } = await receive(fill);
      return publish(owner, { filename, purpose: "batch_output", expiresAt: deps.clock.now() + RESULT_RETENTION_MS }, tmp, bytes);
    },

    /** A result file in two steps, so that publishing can be part of the caller's transaction. */
    stageResult: (fill: (path: string) => Promise<number>) => receive(fill).then(({ tmp, result }) => ({ tmp, bytes: result })),
    publishResult: (owner: Owner, filename: string, staged: { tmp: string; bytes: number }) =>
      publish(owner, { filename, purpose: "batch_output", expiresAt: deps.clock.now() + RESULT_RETENTION_MS }, staged.tmp, staged.bytes),
    discardStaged: (staged: { tmp: string }) => rmSync(staged.tmp, { force: true }),

    get: (owner: Owner, id: string) => toObject(owned(owner, id)),

    /** The row of a file `owner` may read (for batches). */
    row: (owner: Owner, id: string) => owned(owner, id),

    list(owner: Owner, q: { purpose?: string; after?: string; limit?: number }) {
      const limit = q.limit ?? 10000;
      if (!Number.isInteger(limit) || limit < 1 || limit > 10000) throw new ApiError("invalid_request", "limit must be 1–10000", { param: "limit" });
      const rows = files.page(owner.keyId, { purpose: q.purpose, after: q.after, limit: limit + 1 });
      const data = rows.slice(0, limit).map(toObject);
      return { object: "list" as const, data, has_more: rows.length > limit, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null };
    },

    content(owner: Owner, id: string) {
      owned(owner, id);
      return Bun.file(pathOf(id));
    },

    remove(owner: Owner, id: string) {
      owned(owner, id);
      files.markDeleted(id, deps.clock.now());
      rmSync(pathOf(id), { force: true });
      return { id, object: "file" as const, deleted: true };
    },

    /**
     * Removes result files past their retention, and leftovers of interrupted uploads (files on
     * disk with no row, temporary files older than a day). Runs at start and every hour.
     */
    sweep(): number {
      const now = deps.clock.now();
      let removed = 0;
      for (const row of files.expired(now)) {
        files.markDeleted(row.id, now);
        rmSync(pathOf(row.id), { force: true });
        removed++;
      }
      const live = files.liveIds();
      for (const name of readdirSync(dir)) {
        const stale = name.startsWith("tmp-") ? now - statSync(join(dir, name)).mtimeMs > DAY : !live.has(name);
        if (stale) rmSync(join(dir, name), { force: true });
      }
      if (removed) deps.logger.info("files swept", { removed });
      return removed;
    },
  };
}

/** Streams the `file` part to `path` (at most 50 MB; `count` may refuse more) and reads the `purpose` field. */
async function receiveUpload(body: ReadableStream<Uint8Array>, boundary: string, path: string, count: (n: number) => void) {
  let purpose: string | null = null;
  let filename: string | null = null;
  let bytes = 0;
  const sink = Bun.file(path).writer({ highWaterMark: 1024 * 1024 });
  try {
    await readMultipart(body, boundary, (part) => {
      if (part.name === "file") {
        if (filename !== null) throw new ApiError("invalid_request", "only one `file` per upload", { param: "file" });
        filename = part.filename || "upload.jsonl";
        return {
          write: async (chunk) => {
            bytes += chunk.length;
            if (bytes > MAX_FILE_BYTES) throw new ApiError("payload_too_large", `a file may be at most ${MAX_FILE_BYTES} bytes (50 MB)`, { param: "file" });
            count(chunk.length); // before the write: bytes past the quota or the floor never reach the disk
            sink.write(chunk);
            await sink.flush();
          },
          end: () => {},
        };
      }
      if (part.name === "purpose") {
        let text = "";
        const dec = new TextDecoder();
        return {
          write: (chunk) => {
            text += dec.decode(chunk, { stream: true });
            if (text.length > 64) throw new ApiError("invalid_request", "purpose is too long", { param: "purpose" });
          },
          end: () => {
            purpose = (text + dec.decode()).trim();
          },
        };
      }
      return null; // other form fields (e.g. expires_after) are not used
    });
  } catch (e) {
    if (e instanceof MultipartError) throw new ApiError("invalid_request", `malformed multipart body: ${e.message}`, { param: "file" });
    throw e;
  } finally {
    await sink.end();
  }
  if (filename === null) throw new ApiError("invalid_request", "the upload has no `file` part", { param: "file" });
  if (purpose === null) throw new ApiError("invalid_request", "the upload has no `purpose`", { param: "purpose" });
  return { filename: filename as string, purpose: purpose as string, bytes };
}

export function toObject(row: FileRow): FileObject {
  return {
    id: row.id,
    object: "file",
    bytes: row.bytes,
    created_at: Math.floor(row.created_at / 1000),
    filename: row.filename,
    purpose: row.purpose,
    status: row.status,
    status_details: null,
    expires_at: row.expires_at === null ? null : Math.floor(row.expires_at / 1000),
  };
}
