import { statfsSync } from "node:fs";
import { ApiError } from "../../lib/errors";

// Storage limits on uploads (issue 41 M4): without them one key filled the disk with 50 MB files.
// - A quota per account ([files] quota_mb) on the bytes of its live files: uploads and the batch
//   results the server wrote for it. Results are never refused (a batch's answers must not be lost),
//   so they count toward the quota and can take an account past it; then its uploads are refused
//   until it deletes files or the results expire.
// - A floor of free space on the data dir's filesystem ([files] min_free_disk_mb) that uploads must
//   leave, so that many accounts together cannot fill the disk the store lives on either.
// Each is checked three times: before the body is read (its Content-Length, when sent), while it
// streams to the store (what this account has arriving in all its uploads in this process), and when
// the file is published (the store's count, checked and the file's row written in one step, so exact
// across processes too: a file that ends exactly at the quota is kept). The floor is the local disk's:
// with the store on PostgreSQL (no local dir) file bytes do not land here, and there is none.

export interface StorageLimits {
  quota_mb: number;
  min_free_disk_mb: number;
}

const MIB = 1024 * 1024;
/**
 * What a multipart body carries besides the file's bytes. A client sends the file and `purpose`
 * (a few hundred bytes of delimiters and part headers); each part's headers are bounded at 16 KiB
 * (multipart.ts). A Content-Length more than this past the room left is refused unread.
 */
const MULTIPART_SLACK = 64 * 1024;
/** How often (in bytes written) a streaming upload looks at the free space again. */
const STAT_EVERY = 8 * MIB;

export function freeBytes(dir: string): number {
  const s = statfsSync(dir);
  return s.bavail * s.bsize;
}

export interface UploadMeter {
  /** Counts bytes about to be written; throws when they would pass the quota or the floor. */
  add(n: number): void;
  /** The floor's last check, with the file whole in the store, before it is published. */
  finish(): void;
  /** The quota in bytes the publication must keep to (the store checks it with the row), or undefined: none. */
  readonly quotaBytes: number | undefined;
  /** The refusal when publishing found the account's files at `used` bytes, with no room for `bytes` more. */
  overQuota(used: number, bytes: number): ApiError;
  /** The upload is over (published or not): its bytes no longer count as arriving. */
  end(): void;
}

export function createStorageGuard(deps: { dir: string | null; limits: () => StorageLimits; usedBytes: (accountId: string) => Promise<number> }) {
  const free = () => (deps.dir === null ? Infinity : freeBytes(deps.dir));
  /** Bytes arriving now in each account's uploads (one server per data dir: memory is the truth). */
  const arriving = new Map<string, number>();

  function quotaExceeded(used: number, quota: number, adding: string): ApiError {
    return new ApiError(
      "storage_quota_exceeded",
      `this upload would pass the account's storage quota: its files hold ${used} of ${quota} bytes (${mib(used)} of ${mib(quota)} MiB) and the upload ${adding}; delete files (DELETE /v1/files/{file_id}) to make room`,
      { param: "file" },
    );
  }

  function diskLow(freeNow: number, floor: number): ApiError {
    return new ApiError(
      "insufficient_storage",
      `the server is low on disk space: the upload would leave less than the ${mib(floor)} MiB it keeps free (${mib(freeNow)} MiB free now); try again once space is freed`,
      // A retry a few seconds later finds the same disk: SDKs honour this and do not resend the body.
      { param: "file", headers: { "x-should-retry": "false" } },
    );
  }

  return {
    /** Before the body is read: refuses what its announced length (null: none) already rules out. */
    async begin(accountId: string, announced: number | null): Promise<UploadMeter> {
      const { quota_mb, min_free_disk_mb } = deps.limits();
      const quota = quota_mb * MIB;
      const floor = deps.dir === null ? 0 : min_free_disk_mb * MIB;
      const usedAtStart = quota ? await deps.usedBytes(accountId) : 0;
      if (quota && announced !== null) {
        const taken = usedAtStart + (arriving.get(accountId) ?? 0);
        if (announced - MULTIPART_SLACK > quota - taken) throw quotaExceeded(taken, quota, `is ${announced} bytes`);
      }
      if (floor) {
        const f = free();
        if (f - (announced ?? 0) < floor) throw diskLow(f, floor);
      }
      let mine = 0;
      let nextStat = STAT_EVERY;
      let ended = false;
      return {
        add(n) {
          mine += n;
          const now = (arriving.get(accountId) ?? 0) + n;
          arriving.set(accountId, now);
          if (quota && usedAtStart + now > quota) throw quotaExceeded(usedAtStart + now - mine, quota, `passed it at ${mine} bytes`);
          if (floor && mine >= nextStat) {
            nextStat = mine + STAT_EVERY;
            const f = free();
            if (f < floor) throw diskLow(f, floor);
          }
        },
        quotaBytes: quota || undefined,
        overQuota: (used, bytes) => quotaExceeded(used, quota, `is ${bytes} bytes`),
        finish() {
          if (floor) {
            const f = free();
            if (f < floor) throw diskLow(f, floor);
          }
        },
        end() {
          if (ended) return;
          ended = true;
          const left = (arriving.get(accountId) ?? 0) - mine;
          if (left > 0) arriving.set(accountId, left);
          else arriving.delete(accountId);
        },
      };
    },
  };
}

function mib(bytes: number): string {
  return (bytes / MIB).toFixed(1);
}
