#!/usr/bin/env bun
// `bun run build`: dist/appliance (one executable: the CLI and server, migrations and the web
// console embedded) and dist/lib/ (the native libraries it loads, in their package layout).
//   bun src/ops/build/executable.ts [--out DIR] [--no-cuda] [--no-vulkan] [--cpu-only]
// --no-cuda leaves node-llama-cpp's CUDA builds out (~540 MB; hosts without an NVIDIA GPU),
// --no-vulkan its Vulkan build (~70 MB); --cpu-only is both (CPU hosts and CI).

import { cpSync, existsSync, mkdirSync, readdirSync, rmSync, symlinkSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { ADDON_FILE, builtAddon } from "../../3-engines/llama/native/addon-path";
import { CUDA12_BINS } from "../../3-engines/installed";
import { nativeLibPlugin } from "./plugins";

const ROOT = resolve(import.meta.dir, "..", "..", "..");
const NM = join(ROOT, "node_modules");
const HOST = `${process.platform}-${process.arch}`;

/** Worker threads are separate entry points of the executable (see the engines that start them). */
export const WORKER_ENTRIES = ["src/3-engines/transformers/encoder-worker.ts", "src/3-engines/diffusion/worker.ts"];

function copy(from: string, to: string) {
  mkdirSync(join(to, ".."), { recursive: true });
  cpSync(from, to, { recursive: true, dereference: true });
}

export interface Backends {
  cuda: boolean;
  vulkan: boolean;
}

/** The native libraries, each package keeping the layout its RUNPATHs expect. */
function shipLibs(lib: string, o: Backends, log: (l: string) => void) {
  const nlc = join(NM, "node-llama-cpp");
  copy(join(nlc, "package.json"), join(lib, "node-llama-cpp", "package.json"));
  for (const f of ["llama.cpp.info.json", "binariesGithubRelease.json", "grammars"]) copy(join(nlc, "llama", f), join(lib, "node-llama-cpp", "llama", f));
  for (const name of readdirSync(join(NM, "@node-llama-cpp"))) {
    if (!name.startsWith(HOST)) continue;
    const backend = name.slice(HOST.length + 1).split("-")[0];
    if ((backend === "cuda" && !o.cuda) || (backend === "vulkan" && !o.vulkan)) continue;
    const pkg = join(NM, "@node-llama-cpp", name);
    copy(join(pkg, "package.json"), join(lib, "@node-llama-cpp", name, "package.json"));
    copy(join(pkg, "bins"), join(lib, "@node-llama-cpp", name, "bins"));
    log(`lib: @node-llama-cpp/${name}`);
  }
  if (o.cuda) shipCuda12Build(lib, log);
  for (const pkg of [`@img/sharp-${HOST}`, `@img/sharp-libvips-${HOST}`]) {
    if (!existsSync(join(NM, pkg))) throw new Error(`${pkg} is not installed`);
    copy(join(NM, pkg), join(lib, pkg));
  }
  const ort = join("onnxruntime-node", "bin", "napi-v6", process.platform, process.arch);
  copy(join(NM, ort), join(lib, ort));
  const addon = builtAddon();
  if (addon) copy(addon, join(lib, ADDON_FILE));
  else log("lib: the llama addon is not built (./install.sh builds it): vision models will not load from this executable and chat runs without its CPU threadpool and native sampling");
}

/**
 * node-llama-cpp's CUDA 12 build as a folder of its own (CUDA12_BINS): the CUDA build's files with
 * the `-ext` package's fallback libggml-cuda.so (CUDA 12, PTX for sm_50…80) in place of the CUDA 13
 * one, all as relative links. node-llama-cpp loads that fallback only when the CUDA 13 library
 * fails to load; where it loads and then cannot run its kernels (PTX newer than the driver, as on an
 * H100 with driver 580), the chat runtime picks this folder instead (cuda-probe.ts).
 */
export function shipCuda12Build(lib: string, log: (l: string) => void) {
  const name = `${HOST}-cuda`;
  const primary = join(lib, "@node-llama-cpp", name, "bins", name);
  const fallback = join(lib, "@node-llama-cpp", `${name}-ext`, "bins", name, "fallback", "libggml-cuda.so");
  if (!existsSync(primary) || !existsSync(fallback)) return;
  const dir = join(lib, CUDA12_BINS, name);
  mkdirSync(dir, { recursive: true });
  for (const f of readdirSync(primary)) {
    const target = f === "libggml-cuda.so" ? fallback : join(primary, f);
    symlinkSync(relative(dir, target), join(dir, f));
  }
  log(`lib: ${CUDA12_BINS} (node-llama-cpp's CUDA 12 build)`);
}

export async function buildExecutable(o: { out?: string; cpuOnly?: boolean; cuda?: boolean; vulkan?: boolean; log?: (l: string) => void } = {}): Promise<string> {
  const log = o.log ?? ((l: string) => console.log(l));
  const out = resolve(o.out ?? join(ROOT, "dist"));
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out, { recursive: true });
  const outfile = join(out, "appliance");
  const result = await Bun.build({
    entrypoints: [join(ROOT, "cli", "main.ts"), ...WORKER_ENTRIES.map((w) => join(ROOT, w))],
    compile: { outfile },
    target: "bun",
    plugins: [nativeLibPlugin(NM)],
    define: { "process.env.APPLIANCE_COMPILED": JSON.stringify("1") },
  } as Parameters<typeof Bun.build>[0]);
  if (!result.success) throw new Error(`bun build failed:\n${result.logs.map(String).join("\n")}`);
  shipLibs(join(out, "lib"), { cuda: !o.cpuOnly && o.cuda !== false, vulkan: !o.cpuOnly && o.vulkan !== false }, log);
  log(`built ${outfile} and ${join(out, "lib")}`);
  return outfile;
}

if (import.meta.main) {
  const args = process.argv.slice(2);
  const at = args.indexOf("--out");
  try {
    await buildExecutable({ out: at >= 0 ? args[at + 1] : undefined, cpuOnly: args.includes("--cpu-only"), cuda: !args.includes("--no-cuda"), vulkan: !args.includes("--no-vulkan") });
  } catch (e) {
    console.error((e as Error).message);
    process.exit(1);
  }
}
