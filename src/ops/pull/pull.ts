import { createHash, type Hash } from "node:crypto";
import { createReadStream, existsSync, statSync } from "node:fs";
import { mkdir, open, readFile, rename, rm, statfs, truncate, unlink, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { modelFolder, type CatalogueFile, type DownloadEntry } from "../../../models/catalogue";
import { alive } from "../../4-store/lock";
import { checkGguf, GgufFormatError } from "../../3-engines/gguf-check";

// Downloads a catalogue entry's files into <models_dir>/<id>/. Each file is streamed to
// `<path>.part` (never held in memory), hashed as it arrives, checked against the catalogue's size
// and SHA-256, and only then renamed into place: a file at its final path is always a verified one,
// so the server never loads half a download. A GGUF is also checked for a header that holds together
// (gguf-check.ts) before it is moved into place. An interrupted download resumes from the .part with
// an HTTP Range request (RFC 9110 §14.2); a server that ignores the range (200) restarts it cleanly.

export interface PullProgress {
  /** The catalogue role (model, mmproj, tokenizer, …) and the file's path inside the model folder. */
  role: string;
  file: string;
  fileIndex: number;
  fileCount: number;
  phase: "start" | "download" | "hash" | "skip" | "done" | "retry";
  bytesDone: number;
  /** null when neither the catalogue nor the server says. */
  bytesTotal: number | null;
  /** Bytes per second over this run of the download (0 while hashing or skipping). */
  rate: number;
  /** On "retry": what went wrong and how long until the next try. */
  message?: string;
}

export interface PullOptions {
  modelsDir: string;
  fetch?: (url: string, init: RequestInit) => Promise<Response>;
  onProgress?: (p: PullProgress) => void;
  signal?: AbortSignal;
  /** Take files whose catalogue entry records no SHA-256. */
  allowUnverified?: boolean;
  /** Re-hash files already in place instead of trusting their size. */
  verify?: boolean;
  /** Network failures in a row (without a byte of progress) before giving up; default 6. */
  retries?: number;
  /** First back-off delay, doubled per failure up to 30 s; default 1000 ms. */
  retryDelayMs?: number;
}

export interface PulledFile {
  role: string;
  path: string;
  status: "downloaded" | "present";
  bytes: number;
  sha256: string | null;
}

export interface PullResult {
  id: string;
  dir: string;
  files: PulledFile[];
}

export class PullError extends Error {
  override name = "PullError";
}

/** The download did not match the catalogue; what was downloaded is deleted. */
export class ChecksumError extends PullError {
  override name = "ChecksumError";
}

/** A downloaded model file that is not what its name says (a GGUF whose header does not hold); it is deleted. */
export class CorruptFileError extends PullError {
  override name = "CorruptFileError";
}

/** Files of the entry with no checksum recorded (neither a SHA-256 nor a git blob SHA-1 with its size). */
export function unverifiedFiles(entry: DownloadEntry): string[] {
  return Object.values(entry.files)
    .filter((f) => checksumOf(f) === null)
    .map((f) => f.path);
}

/**
 * What a file is checked against: its SHA-256, else its git blob SHA-1 (Hugging Face's record of a
 * file kept outside LFS: sha1 over `blob <size>\0` and the bytes, so the size must be known).
 */
function checksumOf(f: CatalogueFile): { algo: "sha256" | "git-sha1"; want: string } | null {
  if (f.sha256 !== null) return { algo: "sha256", want: f.sha256 };
  if (f.git_sha1 !== undefined && f.bytes !== null) return { algo: "git-sha1", want: f.git_sha1 };
  return null;
}

/** A fresh hash for the file's checksum (a git blob hash starts with its header). */
function newHash(f: CatalogueFile): Hash {
  if (checksumOf(f)?.algo !== "git-sha1") return createHash("sha256");
  return createHash("sha1").update(`blob ${f.bytes}\0`);
}

export async function pullModel(entry: DownloadEntry, opts: PullOptions): Promise<PullResult> {
  const unverified = unverifiedFiles(entry);
  if (unverified.length && !opts.allowUnverified)
    throw new PullError(`no checksum recorded for ${unverified.join(", ")}; refusing to download unverified weights (--allow-unverified takes them anyway)`);
  const dir = join(opts.modelsDir, modelFolder(entry));
  await mkdir(dir, { recursive: true });
  const release = await lock(dir);
  try {
    const roles = Object.entries(entry.files);
    const files: PulledFile[] = [];
    for (const [i, [role, file]] of roles.entries()) {
      const ctx: FileContext = { role, file, dir, index: i, count: roles.length, opts, target: join(dir, file.path) };
      files.push(await pullFile(ctx));
    }
    return { id: entry.id, dir, files };
  } finally {
    await release();
  }
}

interface FileContext {
  role: string;
  file: CatalogueFile;
  dir: string;
  index: number;
  count: number;
  opts: PullOptions;
  target: string;
}

async function pullFile(ctx: FileContext): Promise<PulledFile> {
  const { file, target, opts } = ctx;
  const report = (phase: PullProgress["phase"], bytesDone: number, bytesTotal: number | null, rate = 0, message?: string) =>
    opts.onProgress?.({ role: ctx.role, file: file.path, fileIndex: ctx.index, fileCount: ctx.count, phase, bytesDone, bytesTotal, rate, message });

  if (await isPresent(ctx, report)) {
    report("skip", file.bytes ?? size(target), file.bytes ?? size(target));
    return { role: ctx.role, path: file.path, status: "present", bytes: size(target), sha256: file.sha256 };
  }
  await mkdir(dirname(target), { recursive: true });
  const { bytes, sha256 } = await download(ctx, report);
  await refuseCorrupt(ctx, `${target}.part`);
  await rename(`${target}.part`, target);
  report("done", bytes, bytes);
  return { role: ctx.role, path: file.path, status: "downloaded", bytes, sha256 };
}

type Report = (phase: PullProgress["phase"], done: number, total: number | null, rate?: number, message?: string) => void;

const isGguf = (path: string) => path.toLowerCase().endsWith(".gguf");

/**
 * A GGUF whose header does not hold together (src/3-engines/gguf-check.ts) is deleted and refused,
 * checksum or not: a hub serves what was uploaded, and node-llama-cpp's reader loops on such a file.
 */
async function refuseCorrupt(ctx: FileContext, path: string): Promise<void> {
  if (!isGguf(ctx.target)) return;
  try {
    await checkGguf(path);
  } catch (e) {
    if (!(e instanceof GgufFormatError)) throw e;
    await rm(path, { force: true });
    throw new CorruptFileError(`${ctx.file.path}: ${e.reason}; the download was deleted`);
  }
}

/** A file at its final path counts when its size matches (and, with verify, its hash), and a GGUF's header holds. */
async function isPresent(ctx: FileContext, report: Report): Promise<boolean> {
  const { file, target, opts } = ctx;
  if (!existsSync(target) || !statSync(target).isFile()) return false;
  if (file.bytes !== null && size(target) !== file.bytes) return false;
  if (isGguf(target) && !(await checkGguf(target).then(() => true, (e) => (e instanceof GgufFormatError ? false : Promise.reject(e))))) {
    await rm(target, { force: true }); // a corrupt file left by an earlier pull: fetched again, and checked
    return false;
  }
  const sum = checksumOf(file);
  if (!opts.verify || sum === null) return true;
  const hash = newHash(file);
  await hashFile(target, hash, (n) => report("hash", n, file.bytes ?? size(target)), opts.signal);
  return hash.digest("hex") === sum.want;
}

async function download(ctx: FileContext, report: Report): Promise<{ bytes: number; sha256: string | null }> {
  const { file, opts } = ctx;
  const part = `${ctx.target}.part`;
  const doFetch = opts.fetch ?? ((url: string, init: RequestInit) => fetch(url, init));
  const retries = opts.retries ?? 6;
  const baseDelay = opts.retryDelayMs ?? 1000;

  // What is in the .part is hashed once; from then on the hash follows every byte appended.
  let have = existsSync(part) ? size(part) : 0;
  if (file.bytes !== null && have > file.bytes) {
    await rm(part, { force: true });
    have = 0;
  }
  let hash = newHash(file);
  report("start", have, file.bytes);
  if (have > 0) await hashFile(part, hash, (n) => report("hash", n, file.bytes), opts.signal);
  await ensureSpace(ctx.dir, file.bytes === null ? 0 : file.bytes - have);

  const restart = async () => {
    await truncate(part, 0).catch(() => undefined);
    have = 0;
    hash = newHash(file);
  };

  let failures = 0;
  let restartsWithoutRange = 0;
  const started = performance.now();
  const startedAt = have;
  for (;;) {
    opts.signal?.throwIfAborted();
    if (file.bytes !== null && have === file.bytes) break;
    const progressBefore = have;
    try {
      const headers: Record<string, string> = { "accept-encoding": "identity" };
      if (have > 0) headers.range = `bytes=${have}-`;
      const res = await doFetch(file.url, { headers, signal: opts.signal, redirect: "follow" });
      if (res.status === 416 && have > 0) {
        // The server has nothing past what we hold: the .part is longer than its file (or not
        // its file at all). Start over; the checksum decides in the end.
        await res.body?.cancel();
        if (++restartsWithoutRange > 2) throw new PullError(`${file.url}: the server keeps refusing the range request (HTTP 416)`);
        await restart();
        continue;
      }
      if (!res.ok) {
        await res.body?.cancel();
        const message = `${file.url}: HTTP ${res.status} ${res.statusText}`.trim();
        if (res.status === 408 || res.status === 429 || res.status >= 500) throw new RetryableError(message);
        throw new PullError(message);
      }
      if (have > 0) {
        const start = res.status === 206 ? rangeStart(res.headers.get("content-range")) : null;
        if (start !== have) {
          // 200 (range ignored) or a 206 for another range: this body is the file from byte 0.
          await restart();
          if (res.status === 206) {
            await res.body?.cancel();
            continue;
          }
        }
      }
      const length = Number(res.headers.get("content-length") ?? NaN);
      const total = file.bytes ?? (Number.isFinite(length) ? have + length : null);
      if (!res.body) throw new RetryableError(`${file.url}: empty response`);
      const fh = await open(part, have > 0 ? "a" : "w");
      try {
        let lastReport = 0;
        for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
          if (file.bytes !== null && have + chunk.length > file.bytes) {
            await fh.close();
            await rm(part, { force: true });
            throw new ChecksumError(`${file.path}: the server sent more than the ${file.bytes} bytes the catalogue records; the download was deleted`);
          }
          await fh.write(chunk);
          hash.update(chunk);
          have += chunk.length;
          const now = performance.now();
          if (now - lastReport >= 100) {
            lastReport = now;
            report("download", have, total, rateOf(have - startedAt, now - started));
          }
        }
      } finally {
        await fh.close().catch(() => undefined);
      }
      if (total !== null && have < total) throw new RetryableError(`${file.path}: the connection ended at byte ${have} of ${total}`);
      break;
    } catch (e) {
      if (e instanceof PullError) throw e;
      if (opts.signal?.aborted) throw opts.signal.reason ?? e;
      // Network trouble: resume from what is on disk. A try that moved forward resets the count.
      if (have > progressBefore) failures = 0;
      if (++failures > retries) throw new PullError(`${file.path}: giving up after ${retries} retries: ${describe(e)}`);
      const delay = Math.min(30_000, baseDelay * 2 ** (failures - 1));
      report("retry", have, file.bytes, 0, `${describe(e)}; retrying in ${(delay / 1000).toFixed(delay < 1000 ? 2 : 0)} s`);
      await sleep(delay, opts.signal);
    }
  }

  const actual = hash.digest("hex");
  if (file.bytes !== null && have !== file.bytes) {
    await rm(part, { force: true });
    throw new ChecksumError(`${file.path}: size mismatch: expected ${file.bytes} bytes, got ${have}; the download was deleted`);
  }
  const sum = checksumOf(file);
  if (sum !== null && actual !== sum.want) {
    await rm(part, { force: true });
    throw new ChecksumError(`${file.path}: checksum mismatch: expected ${sum.algo === "sha256" ? "sha256" : "git blob sha1"} ${sum.want}, got ${actual}; the download was deleted`);
  }
  return { bytes: have, sha256: sum?.algo === "git-sha1" ? null : actual };
}

class RetryableError extends Error {}

function rangeStart(contentRange: string | null): number | null {
  const m = /^bytes (\d+)-\d+\/(\d+|\*)$/.exec(contentRange?.trim() ?? "");
  return m ? Number(m[1]) : null;
}

function size(path: string): number {
  return statSync(path).size;
}

function rateOf(bytes: number, ms: number): number {
  return ms > 0 ? (bytes * 1000) / ms : 0;
}

function describe(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

async function hashFile(path: string, hash: Hash, onBytes: (n: number) => void, signal?: AbortSignal): Promise<void> {
  let n = 0;
  let last = 0;
  for await (const chunk of createReadStream(path, { highWaterMark: 1 << 20 }) as AsyncIterable<Buffer>) {
    signal?.throwIfAborted();
    hash.update(chunk);
    n += chunk.length;
    if (n - last >= 64 << 20) {
      last = n;
      onBytes(n);
    }
  }
  onBytes(n);
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** Refuses early when the disk cannot hold what is left to download. */
async function ensureSpace(dir: string, needed: number): Promise<void> {
  if (needed <= 0) return;
  let free: number;
  try {
    const s = await statfs(dir);
    free = s.bavail * s.bsize;
  } catch {
    return; // not every platform answers; the write itself will fail then
  }
  if (free < needed) throw new PullError(`not enough disk space in ${dir}: ${needed} bytes still to download, ${free} free`);
}

/** One pull per model folder at a time: two would append to the same .part. */
async function lock(dir: string): Promise<() => Promise<void>> {
  const path = join(dir, ".pull.lock");
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      await writeFile(path, String(process.pid), { flag: "wx" });
      return () => unlink(path).catch(() => undefined);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
      const pid = Number((await readFile(path, "utf8").catch(() => "")).trim());
      if (Number.isInteger(pid) && pid > 0 && pid !== process.pid && alive(pid))
        throw new PullError(`another pull (process ${pid}) is writing into ${dir}; wait for it or stop it`);
      await rm(path, { force: true }); // left by a pull that died
    }
  }
  throw new PullError(`cannot take the lock ${path}`);
}
