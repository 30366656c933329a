#!/usr/bin/env bun
// Fetches the CUDA libraries the engines load (cuda-libs-manifest.ts) into an installed lib/ tree:
//   bun src/ops/build/cuda-libs.ts --lib DIR [--cache DIR] [--from DIR] [--list]
// Archives are downloaded into the cache as `<file>.partial` (resumed with an HTTP Range request
// after a cut), checked by SHA-256, then only the listed files are extracted (system tar) into a
// staging folder. Once every archive is in, the staging folder replaces lib/cuda in one rename
// and each destination (beside libggml-cuda.so, beside libonnxruntime.so.1) gets relative links.
// Any failure before that rename leaves the previous install as it was. --from DIR takes the
// archives (same file names) from a folder instead (offline hosts), with the same checks.
// APPLIANCE_CUDA_REDIST_URL replaces every archive's URL by `<that>/<file>` (a mirror; the tests).

import { createHash } from "node:crypto";
import { closeSync, existsSync, lstatSync, mkdirSync, openSync, readdirSync, readFileSync, readlinkSync, renameSync, rmSync, statSync, symlinkSync, writeFileSync, writeSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { CUDA_DIR } from "../../3-engines/cuda-preload";
import { CUDA_DESTINATIONS, CUDA_MANIFEST, type CudaArchive, type CudaDestination, type CudaManifest } from "./cuda-libs-manifest";

/** The folder under lib/ holding the installed files (the links point into it). */
const STAMP = "installed.json";

export interface InstallOptions {
  /** The executable's lib/ folder. */
  lib: string;
  cache?: string;
  /** Take archives from this folder instead of downloading. */
  from?: string;
  manifest?: CudaManifest;
  /** Replaces each archive's URL by `${baseUrl}/${file}`. */
  baseUrl?: string;
  log?: (line: string) => void;
  /** Download attempts per archive (each resumes where the last stopped). */
  attempts?: number;
}

export interface InstallResult {
  installed: boolean;
  files: string[];
}

export function defaultCacheDir(): string {
  return join(process.env.XDG_CACHE_HOME || join(homedir(), ".cache"), "appliance", "cuda-libs");
}

/** The folders the fetcher installs libraries into or links them from: doctor searches these. */
export function cudaLibFolders(lib: string): { dir: string; for: "all" | CudaDestination }[] {
  return [
    { dir: join(lib, CUDA_DIR), for: "all" },
    ...(Object.keys(CUDA_DESTINATIONS) as CudaDestination[]).map((d) => ({ dir: join(lib, CUDA_DESTINATIONS[d]), for: d })),
  ];
}

/** The command that installs missing CUDA libraries (run in the appliance's checkout). */
export function cudaLibsFixCommand(o: { offline?: boolean } = {}): string {
  return o.offline
    ? "./install.sh --cuda-libs DIR (DIR holding the archives `bun src/ops/build/cuda-libs.ts --list` names), in the appliance checkout"
    : "./install.sh --cuda (in the appliance checkout; offline hosts: ./install.sh --cuda-libs DIR)";
}

function manifestDigest(m: CudaManifest): string {
  return createHash("sha256").update(JSON.stringify(m)).digest("hex");
}

function urlOf(a: CudaArchive, baseUrl?: string): string {
  return baseUrl ? `${baseUrl.replace(/\/+$/, "")}/${a.file}` : a.url;
}

async function sha256File(path: string): Promise<string> {
  const hash = createHash("sha256");
  const reader = Bun.file(path).stream().getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    hash.update(value);
  }
  return hash.digest("hex");
}

function mib(n: number): string {
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

/** One attempt: appends to `partial` from its current size (Range), or starts over when the server ignores the range. */
async function downloadOnce(url: string, partial: string, log: (l: string) => void, label: string): Promise<void> {
  const have = existsSync(partial) ? statSync(partial).size : 0;
  const res = await fetch(url, { headers: have ? { range: `bytes=${have}-` } : {} });
  if (res.status === 416 && have) return; // the partial file already holds everything; the hash decides
  if (!(res.status === 200 || (res.status === 206 && have))) throw new Error(`GET ${url}: HTTP ${res.status}`);
  const append = res.status === 206;
  if (have && !append) log(`${label}: the server ignored the range; starting over`);
  else if (have) log(`${label}: resuming at ${mib(have)}`);
  const total = Number(res.headers.get("content-length") ?? 0) + (append ? have : 0);
  const fd = openSync(partial, append ? "a" : "w");
  let got = append ? have : 0;
  let shown = 0;
  try {
    const reader = res.body!.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      writeSync(fd, value);
      got += value.length;
      if (total && got - shown >= total / 10) {
        shown = got;
        log(`${label}: ${mib(got)} of ${mib(total)}`);
      }
    }
  } finally {
    closeSync(fd);
  }
  if (total && got < total) throw new Error(`GET ${url}: connection closed at ${got} of ${total} bytes`);
}

/** The archive's path once its SHA-256 is right: from --from DIR, the cache, or downloaded into the cache. */
async function obtain(a: CudaArchive, o: Required<Pick<InstallOptions, "log" | "attempts">> & InstallOptions, cache: string): Promise<string> {
  if (!a.sha256 || !/^[0-9a-f]{64}$/.test(a.sha256)) {
    throw new Error(`${a.file}: the manifest pins no SHA-256 for it, so it is not used (nothing is installed unchecked)`);
  }
  const check = async (path: string, onBad: () => void) => {
    const got = await sha256File(path);
    if (got !== a.sha256) {
      onBad();
      throw new Error(`${a.file}: SHA-256 mismatch: expected ${a.sha256}, got ${got} (${path})`);
    }
  };
  if (o.from) {
    const path = join(o.from, a.file);
    if (!existsSync(path)) throw new Error(`${a.file} is not in ${o.from} (download it from ${a.url})`);
    o.log(`${a.name}: checking ${path}`);
    await check(path, () => {});
    return path;
  }
  mkdirSync(cache, { recursive: true });
  const done = join(cache, a.file);
  if (existsSync(done)) {
    if ((await sha256File(done)) === a.sha256) {
      o.log(`${a.name}: cached (${done})`);
      return done;
    }
    rmSync(done, { force: true });
  }
  const partial = `${done}.partial`;
  const url = urlOf(a, o.baseUrl);
  o.log(`${a.name}: downloading ${url}${a.size ? ` (${mib(a.size)})` : ""}`);
  let last: Error | null = null;
  for (let i = 0; i < o.attempts; i++) {
    try {
      await downloadOnce(url, partial, o.log, a.name);
      last = null;
      break;
    } catch (e) {
      last = e as Error;
      o.log(`${a.name}: ${last.message}${i + 1 < o.attempts ? "; retrying" : ""}`);
      if (i + 1 < o.attempts) await Bun.sleep(Math.min(200 * 2 ** i, 5000));
    }
  }
  if (last) throw new Error(`${a.file}: download failed (the partial file is kept, the next run resumes it): ${last.message}`);
  await check(partial, () => rmSync(partial, { force: true }));
  renameSync(partial, done);
  return done;
}

/** Extracts the archive's wanted files (symlinks kept) into `into`; returns the names taken. */
function extract(a: CudaArchive, archive: string, scratch: string, into: string): string[] {
  rmSync(scratch, { recursive: true, force: true });
  mkdirSync(scratch, { recursive: true });
  const members = [...a.take, ...(a.headers ?? [])].map((g) => `${a.root}/${g}`);
  const r = Bun.spawnSync(["tar", "-xf", archive, "-C", scratch, "--wildcards", "--no-wildcards-match-slash", ...members], { stderr: "pipe", stdout: "ignore" });
  if (r.exitCode !== 0) throw new Error(`${a.file}: tar could not extract ${members.join(", ")}: ${r.stderr.toString().trim()}`);
  const taken: string[] = [];
  for (const glob of a.take) {
    const dir = join(scratch, a.root, dirname(glob));
    const pattern = new Bun.Glob(glob.slice(glob.lastIndexOf("/") + 1));
    const names = existsSync(dir) ? readdirSync(dir).filter((n) => pattern.match(n)) : [];
    if (!names.length) throw new Error(`${a.file}: nothing in it matches ${glob}`);
    for (const n of names) {
      const from = join(dir, n);
      const st = lstatSync(from);
      if (st.isSymbolicLink()) {
        const target = readlinkSync(from);
        if (target.includes("/")) throw new Error(`${a.file}: ${n} links outside its folder (${target})`);
      } else if (!st.isFile()) continue;
      rmSync(join(into, n), { force: true });
      renameSync(from, join(into, n));
      taken.push(n);
    }
  }
  // Headers (a source build's): under include/, named "include/<file>" (never linked beside a library).
  for (const glob of a.headers ?? []) {
    const dir = join(scratch, a.root, dirname(glob));
    const pattern = new Bun.Glob(glob.slice(glob.lastIndexOf("/") + 1));
    const names = existsSync(dir) ? readdirSync(dir).filter((n) => pattern.match(n) && lstatSync(join(dir, n)).isFile()) : [];
    if (!names.length) throw new Error(`${a.file}: nothing in it matches ${glob}`);
    mkdirSync(join(into, "include"), { recursive: true });
    for (const n of names) {
      rmSync(join(into, "include", n), { force: true });
      renameSync(join(dir, n), join(into, "include", n));
      taken.push(`include/${n}`);
    }
  }
  for (const so of a.provides) {
    if (!existsSync(join(into, so))) throw new Error(`${a.file}: ${so} is missing after extraction (a dangling link or an unexpected layout)`);
  }
  rmSync(scratch, { recursive: true, force: true });
  return taken;
}

/** Replaces `link` by a symlink to `target` in one rename. */
function linkAtomically(target: string, link: string) {
  const tmp = `${link}.tmp-${process.pid}`;
  rmSync(tmp, { force: true });
  symlinkSync(target, tmp);
  renameSync(tmp, link);
}

/** Links every installed file into the destinations that exist (an unshipped package is skipped). */
function linkDestinations(lib: string, manifest: CudaManifest, files: Record<string, string[]>, log: (l: string) => void) {
  for (const d of Object.keys(CUDA_DESTINATIONS) as CudaDestination[]) {
    const dir = join(lib, CUDA_DESTINATIONS[d]);
    if (!existsSync(dir)) {
      if (d === "llama") log("the CUDA build of node-llama-cpp is not shipped in this lib/ (built with --cpu-only or --no-cuda?): chat gets no CUDA libraries");
      continue;
    }
    for (const a of manifest.archives.filter((x) => x.to.includes(d))) {
      for (const n of (files[a.file] ?? []).filter((f) => !f.includes("/"))) linkAtomically(relative(dir, join(lib, CUDA_DIR, n)), join(dir, n));
    }
  }
}

interface Stamp {
  manifest: string;
  files: Record<string, string[]>;
}

function readStamp(dir: string): Stamp | null {
  try {
    return JSON.parse(readFileSync(join(dir, STAMP), "utf8")) as Stamp;
  } catch {
    return null;
  }
}

export async function installCudaLibs(opts: InstallOptions): Promise<InstallResult> {
  const o = { log: (l: string) => console.log(l), attempts: 4, ...opts };
  const manifest = o.manifest ?? CUDA_MANIFEST;
  const lib = resolve(o.lib);
  if (!existsSync(lib)) throw new Error(`${lib} does not exist (the executable's lib/ folder)`);
  const target = join(lib, CUDA_DIR);
  const digest = manifestDigest(manifest);
  const stamp = readStamp(target);
  if (stamp?.manifest === digest && Object.values(stamp.files).flat().every((n) => existsSync(join(target, n)))) {
    linkDestinations(lib, manifest, stamp.files, o.log);
    o.log(`CUDA libraries already installed in ${target} (${manifest.id})`);
    return { installed: false, files: Object.values(stamp.files).flat() };
  }
  const unhashed = manifest.archives.filter((a) => !a.sha256);
  if (unhashed.length) throw new Error(`the manifest pins no SHA-256 for ${unhashed.map((a) => a.file).join(", ")}: refusing to download or install anything unchecked`);

  const cache = o.cache ?? defaultCacheDir();
  const staging = join(lib, `.${CUDA_DIR}.staging-${process.pid}`);
  rmSync(staging, { recursive: true, force: true });
  mkdirSync(staging, { recursive: true });
  try {
    const files: Record<string, string[]> = {};
    for (const a of manifest.archives) {
      const archive = await obtain(a, o, cache);
      o.log(`${a.name}: extracting ${a.take.join(", ")}`);
      files[a.file] = extract(a, archive, join(staging, ".scratch"), staging);
    }
    writeFileSync(join(staging, STAMP), JSON.stringify({ manifest: digest, id: manifest.id, files } satisfies Stamp & { id: string }, null, 2));
    const old = join(lib, `.${CUDA_DIR}.old-${process.pid}`);
    if (existsSync(target)) renameSync(target, old);
    renameSync(staging, target);
    rmSync(old, { recursive: true, force: true });
    linkDestinations(lib, manifest, files, o.log);
    o.log(`CUDA libraries installed in ${target} (${manifest.id})`);
    return { installed: true, files: Object.values(files).flat() };
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
}

function list(manifest: CudaManifest): string {
  return manifest.archives.map((a) => `${a.sha256 ?? "(no sha256 pinned)"}  ${a.file}\n    ${a.url}`).join("\n");
}

if (import.meta.main) {
  const args = process.argv.slice(2);
  const opt = (name: string) => {
    const at = args.indexOf(name);
    return at >= 0 ? args[at + 1] : undefined;
  };
  if (args.includes("--list")) {
    console.log(list(CUDA_MANIFEST));
    process.exit(0);
  }
  const lib = opt("--lib");
  if (!lib) {
    console.error("usage: bun src/ops/build/cuda-libs.ts --lib DIR [--cache DIR] [--from DIR] | --list");
    process.exit(2);
  }
  try {
    await installCudaLibs({ lib, cache: opt("--cache"), from: opt("--from"), baseUrl: process.env.APPLIANCE_CUDA_REDIST_URL || undefined, log: (l) => console.log(`    ${l}`) });
  } catch (e) {
    console.error(`cuda-libs: ${(e as Error).message}`);
    process.exit(1);
  }
}
