#!/usr/bin/env bun
// `bun run build`: dist/appliance (one executable: the CLI and server, migrations and the web
// console embedded) and dist/lib/ (the native libraries it loads, in their package layout).
//   bun src/build/executable.ts [--out DIR] [--cpu-only]
// --cpu-only leaves node-llama-cpp's CUDA/Vulkan backends out (a smaller build for CPU hosts and CI).

import { cpSync, existsSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import { ADDON_FILE, builtAddon } from "../engines/llama/native/addon-path";
import { nativeLibPlugin } from "./plugins";

const ROOT = resolve(import.meta.dir, "..", "..");
const NM = join(ROOT, "node_modules");
const HOST = `${process.platform}-${process.arch}`;

/** Worker threads are separate entry points of the executable (see the engines that start them). */
export const WORKER_ENTRIES = ["src/engines/transformers/encoder-worker.ts", "src/engines/diffusion/worker.ts"];

function copy(from: string, to: string) {
  mkdirSync(join(to, ".."), { recursive: true });
  cpSync(from, to, { recursive: true, dereference: true });
}

/** The native libraries, each package keeping the layout its RUNPATHs expect. */
function shipLibs(lib: string, o: { cpuOnly: boolean }, log: (l: string) => void) {
  const nlc = join(NM, "node-llama-cpp");
  copy(join(nlc, "package.json"), join(lib, "node-llama-cpp", "package.json"));
  for (const f of ["llama.cpp.info.json", "binariesGithubRelease.json", "grammars"]) copy(join(nlc, "llama", f), join(lib, "node-llama-cpp", "llama", f));
  for (const name of readdirSync(join(NM, "@node-llama-cpp"))) {
    if (!name.startsWith(HOST)) continue;
    if (o.cpuOnly && name !== HOST) continue;
    const pkg = join(NM, "@node-llama-cpp", name);
    copy(join(pkg, "package.json"), join(lib, "@node-llama-cpp", name, "package.json"));
    copy(join(pkg, "bins"), join(lib, "@node-llama-cpp", name, "bins"));
    log(`lib: @node-llama-cpp/${name}`);
  }
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

export async function buildExecutable(o: { out?: string; cpuOnly?: boolean; log?: (l: string) => void } = {}): Promise<string> {
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
  shipLibs(join(out, "lib"), { cpuOnly: o.cpuOnly === true }, log);
  log(`built ${outfile} and ${join(out, "lib")}`);
  return outfile;
}

if (import.meta.main) {
  const args = process.argv.slice(2);
  const at = args.indexOf("--out");
  try {
    await buildExecutable({ out: at >= 0 ? args[at + 1] : undefined, cpuOnly: args.includes("--cpu-only") });
  } catch (e) {
    console.error((e as Error).message);
    process.exit(1);
  }
}
