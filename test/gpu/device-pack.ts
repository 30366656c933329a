// What test/gpu/device-check.sh needs on a GPU machine that has no network, packed to travel beside
// the checkout: the lent machines take the working tree plus at most 64 MiB in all (the `carry`
// paths included), and have nvcc 13.0, CMake, ninja and a C++ compiler but no Bun and no npm.
//
//   bun test/gpu/device-pack.ts [--out DIR] [--no-vulkan]      (default DIR: .cache/device-pack)
//
// Writes into DIR (each file xz-compressed):
//   bun.xz               this Bun (about 38 MB of the budget; cached by version)
//   node_modules.tar.xz  the packages the check's entry points import (Bun's bundler lists them, read
//                        from its metafile), with node-llama-cpp, its CPU build, its CUDA build less
//                        its 159 MB libggml-cuda.so (the source build made there replaces it), its
//                        Vulkan build (and this host's Vulkan loader, for a machine with the
//                        driver's ICD but no loader), and this checkout's llama addon; identical files once
//   llama.cpp.tar.xz     the part of llama.cpp's source (node-llama-cpp's release) that the CUDA
//                        source build and llama-server need, with LLAMA_COMMIT in place of .git
//   manifest.json        what is in it, what was left out and why, sizes
// and refuses (exit 1) when the pack and the tracked files together are over the limit.
// device-check.sh unpacks it where node_modules is absent (test/gpu/device-unpack.sh).
// Left out, by size: node-llama-cpp's CUDA 13 libggml-cuda.so and its CUDA 12 fallback (-ext),
// onnxruntime (and its CUDA provider, which only `./install.sh --cuda` fetches) and transformers.js:
// the check's rows say so.
import { createHash } from "node:crypto";
import { existsSync, linkSync, lstatSync, mkdirSync, readdirSync, readFileSync, realpathSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { addonBuildDir, llamaTag } from "../../src/3-engines/llama/native/addon-path";
import { llamaCppSource } from "../../src/3-engines/llama/native/build";

const ROOT = resolve(import.meta.dir, "..", "..");
const NM = join(ROOT, "node_modules");
export const LIMIT_BYTES = 64 * 1024 * 1024;
const HOST = `${process.platform}-${process.arch}`;

/** Where the pack puts the Vulkan loader's libraries, each in a folder of its name (under node_modules, so they unpack with the packages). */
export const VULKAN_LOADER_DIR = join("node_modules", ".appliance", "vulkan-loader");
export const VULKAN_LOADER_LIBS = ["libvulkan.so.1", "libGLdispatch.so.0"];

/** A library of this host, the file itself (ldconfig's entry resolved), or null. */
function hostLibrary(name: string): string | null {
  const r = Bun.spawnSync(["ldconfig", "-p"], { stdout: "pipe", stderr: "pipe" });
  const line = r.stdout.toString().split("\n").find((l) => l.trim().startsWith(`${name} (libc6,x86-64)`));
  const path = line?.split(" => ")[1]?.trim();
  return path && existsSync(path) ? realpathSync(path) : null;
}

/** Packages left behind on purpose, with the reason the check's table gives. */
export const LEFT_OUT: Record<string, string> = {
  "onnxruntime-node": "45 MB for the CPU alone; its CUDA provider (hundreds of MB) comes only from ./install.sh --cuda",
  "onnxruntime-web": "the browser build",
  "@huggingface/transformers": "runs on onnxruntime, which is not carried",
  "playwright-core": "the console's browser tests do not run there",
};

/** The scripts the check runs, and the test files it names (read from device-check.sh itself). */
export function entryPoints(): string[] {
  const script = readFileSync(join(import.meta.dir, "device-check.sh"), "utf8");
  const tests = [...new Set(script.match(/test\/[\w/.-]+\.test\.ts/g) ?? [])];
  const gpu = readdirSync(import.meta.dir).filter((f) => f.endsWith(".ts") && !f.endsWith(".slow.ts") && f !== "device-pack.ts" && f !== "cuda-stubs.ts").map((f) => join("test", "gpu", f));
  return [...gpu, ...tests, "cli/main.ts", "models/cache.ts", "src/ops/build/cuda-source.ts", "test/bench/llama-server-build.ts"].map((p) => join(ROOT, p));
}

/** node_modules/<pkg> folders (nested ones too) holding any of these files. */
export function packageRoots(files: string[]): string[] {
  const roots = new Set<string>();
  for (const f of files) {
    const m = /^(.*\/node_modules\/(?:@[^/]+\/)?[^/]+)\//.exec(f);
    if (m) roots.add(m[1]!);
  }
  return [...roots].sort();
}

async function importedPackages(): Promise<{ roots: string[]; inputs: Set<string> }> {
  const result = await Bun.build({
    entrypoints: entryPoints(),
    target: "bun",
    metafile: true,
    // bun:test, the platform packages (chosen below) and what is left out stay imports
    external: ["bun:*", "@node-llama-cpp/*", ...Object.keys(LEFT_OUT)],
    throw: false,
  });
  if (!result.success) throw new Error(`the bundler could not follow the check's imports:\n${result.logs.map(String).join("\n")}`);
  const inputs = Object.keys(result.metafile!.inputs).map((f) => resolve(ROOT, f));
  return { roots: packageRoots(inputs), inputs: new Set(inputs) };
}

interface PackageJson {
  os?: string[];
  cpu?: string[];
  libc?: string[];
  optionalDependencies?: Record<string, string>;
}

/** Whether a platform package (sharp's @img/sharp-linux-x64, say) is for this host: its os, cpu and libc fields. */
export function forThisHost(p: PackageJson, platform: string = process.platform, arch: string = process.arch): boolean {
  const fits = (list: string[] | undefined, v: string) => !list || list.some((x) => x === v) || (list.every((x) => x.startsWith("!")) && !list.includes(`!${v}`));
  return fits(p.os, platform) && fits(p.cpu, arch) && fits(p.libc, "glibc");
}

/** The packages plus, over and over, each one's optional dependencies installed for this host (native builds found by a computed require). */
export function withPlatformPackages(packages: string[], read: (pkg: string) => PackageJson | null): string[] {
  const all = new Set(packages);
  const queue = [...packages];
  while (queue.length) {
    const pj = read(queue.pop()!);
    for (const dep of Object.keys(pj?.optionalDependencies ?? {})) {
      if (all.has(dep) || dep.startsWith("@node-llama-cpp/")) continue; // node-llama-cpp's builds are chosen by name
      const dpj = read(dep);
      if (dpj && forThisHost(dpj)) {
        all.add(dep);
        queue.push(dep);
      }
    }
  }
  return [...all].sort();
}

/** A file of a package that the check never reads: types, maps, docs, TypeScript sources beside their build. */
export function droppable(rel: string): boolean {
  return /\.(d\.[cm]?ts|map|md|markdown)$/i.test(rel) || /(^|\/)(docs?|test|tests|__tests__|example|examples)\//.test(rel) || (/\.[cm]?ts$/.test(rel) && /(^|\/)src\//.test(rel));
}

interface Staged {
  files: number;
  bytes: number;
  deduped: number;
}

/** Hard-links every kept file of `from` into `to`; a file whose bytes were already staged becomes a link to that copy (tar then stores it once). */
function stage(from: string, to: string, seen: Map<string, string>, keep: (rel: string, abs: string) => boolean, s: Staged) {
  const walk = (dir: string) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const abs = join(dir, e.name);
      const rel = relative(from, abs);
      if (e.isDirectory()) {
        if (e.name === "node_modules") continue; // nested packages are staged as packages of their own
        walk(abs);
        continue;
      }
      if (!e.isFile() || !keep(rel, abs)) continue;
      const dest = join(to, rel);
      mkdirSync(dirname(dest), { recursive: true });
      const st = statSync(abs);
      const hash = st.size > 64 * 1024 ? createHash("sha256").update(readFileSync(abs)).digest("hex") : null;
      const first = hash ? seen.get(hash) : undefined;
      if (first) {
        linkSync(first, dest);
        s.deduped += st.size;
      } else {
        linkSync(abs, dest);
        if (hash) seen.set(hash, dest);
      }
      s.files++;
      s.bytes += st.size;
    }
  };
  walk(from);
}

function sh(cmd: string[], what: string, cwd?: string): string {
  const r = Bun.spawnSync(cmd, { cwd, stdout: "pipe", stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`${what} failed (${cmd.join(" ")}): ${r.stderr.toString().trim().slice(-800)}`);
  return r.stdout.toString();
}

function xzTar(cwd: string, paths: string[], out: string) {
  // one thread and a 64 MiB window: the CPU variants and libraries of three builds compress against each other
  sh(["bash", "-c", `set -o pipefail; tar -C "$1" --owner=0 --group=0 -cf - "\${@:3}" | xz -9 -T1 -c >"$2.tmp" && mv "$2.tmp" "$2"`, "tar", cwd, out, ...paths], `packing ${out}`);
}

/** The llama.cpp source the CUDA build and llama-server read (CMake files, ggml with its CPU and CUDA backends, llama, common, the server, mtmd, vendor). */
export const LLAMA_SOURCE_PATHS = [
  "CMakeLists.txt", "LICENSE", "licenses", "cmake", "include", "src", "common", "vendor",
  "ggml/CMakeLists.txt", "ggml/cmake", "ggml/include", "ggml/src/ggml-cpu", "ggml/src/ggml-cuda",
  "tools/CMakeLists.txt", "tools/server", "tools/mtmd", "tools/ui/CMakeLists.txt", "tools/ui/ui.h.in", "tools/ui/ui.cpp.in", "tools/ui/sources.cmake", "scripts/ui-assets.cmake",
];

function packLlamaSource(out: string, log: (l: string) => void): { commit: string } {
  const src = llamaCppSource(log);
  const ggmlSrcFiles = readdirSync(join(src, "ggml", "src"), { withFileTypes: true }).filter((e) => e.isFile()).map((e) => `ggml/src/${e.name}`);
  const paths = [...LLAMA_SOURCE_PATHS, ...ggmlSrcFiles].filter((p) => existsSync(join(src, p)));
  const commit = `${sh(["git", "rev-parse", "--short", "HEAD"], "reading llama.cpp's commit", src).trim()} ${sh(["git", "rev-list", "--count", "HEAD"], "counting llama.cpp's commits", src).trim()}`;
  const tmp = join(dirname(out), "llama-src-stage");
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  // only tracked files: the clone's own build trees never travel
  sh(["bash", "-c", `git -C "$1" archive --format=tar HEAD "\${@:3}" | tar -C "$2" -xf -`, "archive", src, tmp, ...paths], "exporting llama.cpp's source");
  writeFileSync(join(tmp, "LLAMA_COMMIT"), `${commit}\n`);
  xzTar(tmp, ["."], out);
  rmSync(tmp, { recursive: true, force: true });
  return { commit };
}

function packBun(out: string, log: (l: string) => void): string {
  const version = Bun.version;
  const stamp = `${out}.version`;
  if (existsSync(out) && existsSync(stamp) && readFileSync(stamp, "utf8").trim() === version) return version;
  log(`device-pack: compressing Bun ${version} (${(statSync(process.execPath).size / 1e6).toFixed(0)} MB; about two minutes)`);
  sh(["bash", "-c", `xz --x86 --lzma2=preset=9e -T1 -c "$1" >"$2.tmp" && mv "$2.tmp" "$2"`, "xz", process.execPath, out], "compressing Bun");
  writeFileSync(stamp, `${version}\n`);
  return version;
}

/** Bytes of the files git would send (tracked, and untracked ones it does not ignore). */
export function treeBytes(root = ROOT): number {
  const list = sh(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], "listing the working tree", root).split("\0").filter(Boolean);
  let n = 0;
  for (const f of list) {
    try {
      const st = lstatSync(join(root, f));
      if (st.isFile()) n += st.size;
    } catch {}
  }
  return n;
}

export interface PackManifest {
  created: string;
  bun: string;
  llamaCpp: { tag: string; commit: string };
  addon: string;
  packages: string[];
  builds: string[];
  leftOut: Record<string, string>;
  files: Record<string, number>;
  unpackedBytes: number;
  treeBytes: number;
  limitBytes: number;
}

export async function devicePack(o: { out: string; vulkan: boolean; log?: (l: string) => void }): Promise<PackManifest> {
  const log = o.log ?? ((l: string) => console.log(l));
  const out = resolve(o.out);
  mkdirSync(out, { recursive: true });
  const tag = llamaTag();
  const addonDir = addonBuildDir();
  if (!existsSync(join(addonDir, "appliance-llama.node"))) throw new Error(`the llama addon is not built (${addonDir}): run ./install.sh first`);

  const { roots, inputs } = await importedPackages();
  const llamaPkgs = [`@node-llama-cpp/${HOST}`, `@node-llama-cpp/${HOST}-cuda`, ...(o.vulkan ? [`@node-llama-cpp/${HOST}-vulkan`] : [])];
  const leftOut: Record<string, string> = {
    ...LEFT_OUT,
    [`@node-llama-cpp/${HOST}-cuda/…/libggml-cuda.so`]: "node-llama-cpp's CUDA 13 kernels, 159 MB: the source build is made there instead",
    [`@node-llama-cpp/${HOST}-cuda-ext`]: "the CUDA 12 fallback and CUDA's own libraries, 358 MB",
  };
  if (!o.vulkan) leftOut[`@node-llama-cpp/${HOST}-vulkan`] = "--no-vulkan";

  const stageDir = join(out, "stage");
  rmSync(stageDir, { recursive: true, force: true });
  const seen = new Map<string, string>();
  const s: Staged = { files: 0, bytes: 0, deduped: 0 };
  const readPkg = (pkg: string): PackageJson | null => {
    const f = join(NM, pkg, "package.json");
    return existsSync(f) ? (JSON.parse(readFileSync(f, "utf8")) as PackageJson) : null;
  };
  const packages = withPlatformPackages([...new Set([...roots.map((r) => relative(NM, r)), "node-llama-cpp", ...llamaPkgs])], readPkg);
  for (const p of packages) {
    const from = join(NM, p);
    if (!existsSync(from)) throw new Error(`${p} is not installed (${from})`);
    stage(from, join(stageDir, "node_modules", p), seen, (rel, abs) => {
      if (inputs.has(abs)) return true; // a file the check imports goes, whatever its name
      if (p === "node-llama-cpp" && rel === join("llama", "gitRelease.bundle")) return false; // the source travels pruned, below
      if (p === `@node-llama-cpp/${HOST}-cuda` && rel.endsWith("libggml-cuda.so")) return false;
      return !droppable(rel);
    }, s);
  }
  // this checkout's llama addon (decode loop, scoring, mtmd), built by install.sh for the native sources here
  stage(addonDir, join(stageDir, relative(ROOT, addonDir)), seen, () => true, s);
  // the Vulkan loader and glvnd's dispatch library (which the NVIDIA driver's Vulkan ICD,
  // libGLX_nvidia.so.0, links), ~0.6 MB, needing only libc: a GPU machine's image may have the
  // driver but neither; device-check.sh puts each on the library path only where it is missing
  for (const name of o.vulkan ? VULKAN_LOADER_LIBS : []) {
    const lib = hostLibrary(name);
    if (!lib) {
      leftOut[name] = "this host has none to carry";
      continue;
    }
    const dir = join(stageDir, VULKAN_LOADER_DIR, name);
    mkdirSync(dir, { recursive: true });
    linkSync(lib, join(dir, name));
    s.files++;
    s.bytes += statSync(lib).size;
  }

  const files: Record<string, number> = {};
  const nmOut = join(out, "node_modules.tar.xz");
  log(`device-pack: ${packages.length} packages, ${s.files} files, ${(s.bytes / 1e6).toFixed(1)} MB (${(s.deduped / 1e6).toFixed(1)} MB of it identical copies); compressing`);
  xzTar(stageDir, ["node_modules"], nmOut);
  rmSync(stageDir, { recursive: true, force: true });
  files["node_modules.tar.xz"] = statSync(nmOut).size;

  const srcOut = join(out, "llama.cpp.tar.xz");
  const { commit } = packLlamaSource(srcOut, log);
  files["llama.cpp.tar.xz"] = statSync(srcOut).size;

  const bunOut = join(out, "bun.xz");
  const bun = packBun(bunOut, log);
  files["bun.xz"] = statSync(bunOut).size;

  const manifest: PackManifest = {
    created: new Date().toISOString(),
    bun,
    llamaCpp: { tag, commit },
    addon: relative(ROOT, addonDir),
    packages,
    builds: llamaPkgs,
    leftOut,
    files,
    unpackedBytes: s.bytes,
    treeBytes: treeBytes(),
    limitBytes: LIMIT_BYTES,
  };
  writeFileSync(join(out, "manifest.json"), `${JSON.stringify(manifest, null, 2)}\n`);
  return manifest;
}

/** The pack's bytes: its three files, and room for the manifest and the version stamp (a few KB). */
export function packBytes(m: PackManifest): number {
  return Object.values(m.files).reduce((a, b) => a + b, 0) + 16 * 1024;
}

if (import.meta.main) {
  const args = process.argv.slice(2);
  const at = args.indexOf("--out");
  const out = at >= 0 ? args[at + 1]! : join(ROOT, ".cache", "device-pack");
  try {
    const m = await devicePack({ out, vulkan: !args.includes("--no-vulkan") });
    const MiB = (n: number) => (n / 1024 / 1024).toFixed(1);
    for (const [f, n] of Object.entries(m.files)) console.log(`device-pack: ${f.padEnd(20)} ${MiB(n).padStart(6)} MiB`);
    const total = packBytes(m) + m.treeBytes;
    console.log(`device-pack: the pack ${MiB(packBytes(m))} MiB + the working tree ${MiB(m.treeBytes)} MiB = ${MiB(total)} MiB of ${MiB(m.limitBytes)} MiB`);
    if (total > m.limitBytes) {
      console.error("device-pack: over the limit: leave Vulkan out (--no-vulkan), or trim what the check imports");
      process.exit(1);
    }
    console.log(`device-pack: carry "${relative(ROOT, resolve(out))}"; on the machine: test/gpu/device-check.sh (it unpacks the pack first)`);
  } catch (e) {
    console.error(`device-pack: ${(e as Error).message}`);
    process.exit(1);
  }
}
