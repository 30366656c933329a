import type { Principal } from "../accounts/types";
import { ApiError } from "../../lib/errors";
import type { Clock } from "../../lib/clock";
import type { Logger } from "../../lib/log";
import type { FileRow, FileSink, FileStore, NewFile } from "../../4-store/files";
import { boundaryOf, MultipartError, readMultipart } from "./multipart";
import { createStorageGuard, type StorageLimits } from "./storage";

// Files (spec §2.10, §4): batch inputs uploaded by clients and batch results written by the
// server. Bytes and rows live in the store (src/4-store/files.ts: on the data dir's disk with
// SQLite, in the database with PostgreSQL), streamed in and out, never whole in memory. A file is
// visible once published, never half-written. A file belongs to the key that created it: other
// keys, even of the same account, get 404 (spec §5.6).

export const MAX_FILE_BYTES = 50 * 1024 * 1024;
export const RESULT_RETENTION_MS = 30 * 86_400_000;
const PURPOSES = ["batch"];

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
  store: FileStore;
  clock: Clock;
  logger: Logger;
  /** [files] quota and free-space floor for uploads (src/2-services/files/storage.ts), read per upload; none when absent. */
  storage?: () => StorageLimits;
}) {
  const files = deps.store;
  const storage = createStorageGuard({
    dir: files.localDir,
    limits: deps.storage ?? (() => NO_LIMITS),
    usedBytes: (account) => files.usedBytes(account, deps.clock.now()),
  });

  async function owned(owner: Owner, id: string): Promise<FileRow> {
    const row = await files.byId(id);
    if (!row || row.key_id !== owner.keyId) throw new ApiError("not_found", `No such File object: ${id}`, { param: "file_id" });
    return row;
  }

  /** The row of a result file the server wrote for `owner` (kept RESULT_RETENTION_MS, then swept). */
  const resultRow = (owner: Owner, filename: string, sink: FileSink): NewFile => {
    const now = deps.clock.now();
    return { id: sink.id, key_id: owner.keyId, account_id: owner.accountId, filename, purpose: "batch_output", bytes: sink.bytes, status: "processed", created_at: now, expires_at: now + RESULT_RETENTION_MS };
  };

  async function stageResult(fill: (sink: FileSink) => Promise<void>): Promise<FileSink> {
    const sink = await files.create();
    try {
      await fill(sink);
      await sink.close();
      return sink;
    } catch (e) {
      await sink.discard().catch(() => {});
      throw e;
    }
  }

  return {
    /**
     * POST /v1/files: a multipart body with `file` and `purpose`, streamed to the store, within the
     * account's storage quota and the disk's free-space floor (`contentLength`: the request's, if sent).
     */
    async upload(principal: Principal, body: ReadableStream<Uint8Array> | null, contentType: string | null, contentLength: number | null = null): Promise<FileObject> {
      const boundary = boundaryOf(contentType);
      if (!boundary || !body) throw new ApiError("invalid_request", "the body must be multipart/form-data with a `file` and a `purpose`", { param: "file" });
      const meter = await storage.begin(principal.accountId, contentLength);
      try {
        const sink = await files.create();
        try {
          const { filename, purpose, bytes } = await receiveUpload(body, boundary, sink, meter.add);
          if (!PURPOSES.includes(purpose))
            throw new ApiError("invalid_request", `purpose "${purpose}" is not supported (supported: ${PURPOSES.join(", ")})`, { param: "purpose" });
          meter.finish();
          const row: NewFile = { id: sink.id, key_id: principal.keyId, account_id: principal.accountId, filename, purpose, bytes, status: "processed", created_at: deps.clock.now(), expires_at: null };
          // The quota's exact check and the row are one step in the store: uploads published at once cannot pass it together.
          const published = await files.publish(row, meter.quotaBytes);
          if (!published.ok) throw meter.overQuota(published.used, bytes);
          return toObject({ ...row, deleted_at: null });
        } catch (e) {
          await sink.discard().catch((d) => deps.logger.warn("a failed upload's bytes could not be dropped (the sweeper will)", { file: sink.id, error: (d as Error).message }));
          throw e;
        }
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
    async createResult(owner: Owner, filename: string, fill: (sink: FileSink) => Promise<void>): Promise<FileObject> {
      const sink = await stageResult(fill);
      try {
        const row = resultRow(owner, filename, sink);
        await files.publish(row);
        return toObject({ ...row, deleted_at: null });
      } catch (e) {
        await sink.discard().catch(() => {});
        throw e;
      }
    },

    /** A result file in two steps, so that publishing can be part of the caller's transaction (a batch's end): its bytes, written and closed. */
    stageResult,
    /** The row a staged result is published with. */
    resultRow,

    get: async (owner: Owner, id: string) => toObject(await owned(owner, id)),

    /** The row of a file `owner` may read (for batches). */
    row: (owner: Owner, id: string) => owned(owner, id),

    /** A live file's row whoever owns it (the batch worker, the console's ownership check); null when there is none. */
    byId: (id: string) => files.byId(id),

    async list(owner: Owner, q: { purpose?: string; after?: string; limit?: number }) {
      const limit = q.limit ?? 10000;
      if (!Number.isInteger(limit) || limit < 1 || limit > 10000) throw new ApiError("invalid_request", "limit must be 1–10000", { param: "limit" });
      const rows = await files.page(owner.keyId, { purpose: q.purpose, after: q.after, limit: limit + 1 });
      const data = rows.slice(0, limit).map(toObject);
      return { object: "list" as const, data, has_more: rows.length > limit, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null };
    },

    /** The file's bytes, read a piece at a time: a Response body. */
    async content(owner: Owner, id: string): Promise<Blob | ReadableStream<Uint8Array>> {
      await owned(owner, id);
      const body = await files.contents(id);
      if (!body) throw new ApiError("not_found", `No such File object: ${id}`, { param: "file_id" });
      return body;
    },

    /** A file's bytes as a stream, whoever owns it (the batch worker reads a batch's input); null when there is no such file. */
    async stream(id: string): Promise<ReadableStream<Uint8Array> | null> {
      const body = await files.contents(id);
      return body === null ? null : body instanceof Blob ? body.stream() : body;
    },

    async remove(owner: Owner, id: string) {
      await owned(owner, id);
      await files.remove(id, deps.clock.now());
      return { id, object: "file" as const, deleted: true };
    },

    /**
     * Removes result files past their retention, and leftovers of interrupted uploads (bytes that no
     * file row names, older than a day). Runs at start and every hour.
     */
    async sweep(): Promise<number> {
      const removed = await files.sweep(deps.clock.now());
      if (removed) deps.logger.info("files swept", { removed });
      return removed;
    },
  };
}

/** Streams the `file` part into `sink` (at most 50 MB; `count` may refuse more) and reads the `purpose` field. */
async function receiveUpload(body: ReadableStream<Uint8Array>, boundary: string, sink: FileSink, count: (n: number) => void) {
  let purpose: string | null = null;
  let filename: string | null = null;
  let bytes = 0;
  try {
    await readMultipart(body, boundary, (part) => {
      if (part.name === "file") {
        if (filename !== null) throw new ApiError("invalid_request", "only one `file` per upload", { param: "file" });
        filename = part.filename || "upload.jsonl";
        return {
          write: async (chunk) => {
            bytes += chunk.length;
            if (bytes > MAX_FILE_BYTES) throw new ApiError("payload_too_large", `a file may be at most ${MAX_FILE_BYTES} bytes (50 MB)`, { param: "file" });
            count(chunk.length); // before the write: bytes past the quota or the floor never reach the store
            await sink.write(chunk);
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
  }
  await sink.close();
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
