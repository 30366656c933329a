#!/usr/bin/env bun
// Builds the appliance's llama.cpp addon (this folder: image input through llama.cpp's tools/mtmd,
// the persistent CPU threadpool, token sampling) from the source node-llama-cpp ships (its git bundle),
// linked against node-llama-cpp's prebuilt shared libraries. Needs cmake, a C++17 compiler, git
// and Node's N-API headers. Run by install.sh; idempotent.
//   bun src/3-engines/llama/native/build.ts [--force]

import { createHash } from "node:crypto";
import { copyFileSync, existsSync, mkdirSync, renameSync, rmSync } from "node:fs";
import { availableParallelism } from "node:os";
import { dirname, join } from "node:path";
import { ADDON_FILE, NATIVE_DIR, addonBuildDir, builtAddon, llamaTag, nodeLlamaCppDir, prebuiltLibDir } from "./addon-path";

function run(cmd: string[], cwd?: string) {
  const p = Bun.spawnSync(cmd, { cwd, stdout: "inherit", stderr: "inherit" });
  if (p.exitCode !== 0) throw new Error(`${cmd.join(" ")} failed (exit ${p.exitCode})`);
}

function which(cmd: string): boolean {
  return Bun.spawnSync(["sh", "-c", `command -v ${cmd}`]).exitCode === 0;
}

/** node_api.h: Node's own headers (Debian's nodejs, or beside the node binary). */
function nodeApiInclude(): string {
  const candidates = [process.env.NODE_API_INCLUDE, "/usr/include/node", "/usr/local/include/node"];
  const node = Bun.which("node");
  if (node) candidates.push(join(dirname(dirname(node)), "include", "node"));
  const found = candidates.find((d) => d && existsSync(join(d, "node_api.h")));
  if (!found) throw new Error("node_api.h not found: install Node's headers (Debian: nodejs / libnode-dev) or set NODE_API_INCLUDE");
  return found;
}

/**
 * The llama.cpp source node-llama-cpp ships (its git bundle), extracted once beside the addon
 * builds: the same release as the prebuilt libraries (also what test/bench builds llama-server from).
 */
export function llamaCppSource(log: (line: string) => void = (l) => console.log(l)): string {
  const tag = llamaTag();
  const src = join(addonBuildDir(), "..", `llama.cpp-${tag}`);
  if (!existsSync(join(src, "tools", "mtmd", "mtmd.cpp"))) {
    for (const tool of ["git"]) if (!which(tool)) throw new Error(`"${tool}" is not installed (needed to extract llama.cpp's source)`);
    log(`extracting llama.cpp ${tag} from node-llama-cpp's bundle`);
    rmSync(src, { recursive: true, force: true });
    rmSync(`${src}.tmp`, { recursive: true, force: true });
    mkdirSync(dirname(src), { recursive: true });
    run(["git", "clone", "--quiet", join(nodeLlamaCppDir(), "llama", "gitRelease.bundle"), `${src}.tmp`]);
    renameSync(`${src}.tmp`, src);
  }
  return src;
}

export function buildNativeAddon(opts: { force?: boolean; log?: (line: string) => void } = {}): string {
  const log = opts.log ?? ((l: string) => console.log(l));
  const existing = builtAddon();
  if (existing && !opts.force) {
    log(`llama addon: up to date (${existing})`);
    return existing;
  }
  for (const tool of ["cmake", "git", "c++"]) if (!which(tool)) throw new Error(`llama addon: "${tool}" is not installed (needed to build llama.cpp's multimodal library)`);
  const out = addonBuildDir();
  const tag = llamaTag();
  const src = llamaCppSource(log);
  // One build tree per llama.cpp release and checkout, shared by binding revisions: a changed binding
  // recompiles alone. Another checkout of the project (an older commit, for a baseline bench) gets its
  // own: CMake refuses a tree made from another source folder.
  const build = join(out, "..", `addon-build-${tag}-${createHash("sha256").update(NATIVE_DIR).digest("hex").slice(0, 8)}`);
  const generator = which("ninja") ? ["-G", "Ninja"] : [];
  log(`llama addon: building into ${out} (${availableParallelism()} jobs; a few minutes)`);
  run([
    "cmake", "-S", NATIVE_DIR, "-B", build, ...generator, "-DCMAKE_BUILD_TYPE=Release",
    `-DLLAMA_SRC=${src}`, `-DLLAMA_LIBS=${prebuiltLibDir()}`, `-DLLAMA_TAG=${tag}`,
    `-DNODE_API_INCLUDE=${nodeApiInclude()}`, `-DNODE_ADDON_API_INCLUDE=${dirname(require.resolve("node-addon-api/package.json"))}`,
  ]);
  run(["cmake", "--build", build, "--parallel", String(availableParallelism())]);
  const target = join(out, ADDON_FILE);
  mkdirSync(out, { recursive: true });
  copyFileSync(join(build, ADDON_FILE), `${target}.tmp`);
  renameSync(`${target}.tmp`, target);
  log(`llama addon: built ${target}`);
  return target;
}

if (import.meta.main) {
  try {
    buildNativeAddon({ force: process.argv.includes("--force") });
  } catch (e) {
    console.error((e as Error).message);
    process.exit(1);
  }
}
