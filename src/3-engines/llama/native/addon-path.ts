import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { dlopenAll, RTLD_GLOBAL, RTLD_NOLOAD, RTLD_NOW } from "../../dlopen";
import { COMPILED, executableLibDir, installedPackageDir } from "../../installed";

// Where the appliance's llama.cpp addon (this folder: image input through llama.cpp's tools/mtmd,
// the CPU threadpool, token sampling) is built and found. The folder name carries the llama.cpp release
// node-llama-cpp ships and a hash of the addon's own sources, so a new node-llama-cpp or a changed
// binding is rebuilt instead of loaded stale. (The parent folder keeps its first name, mtmd: the
// extracted llama.cpp source and the shared build tree live there, and the llama-server bench
// build points at that source.)

export const NATIVE_DIR = import.meta.dir;
export const ADDON_FILE = "appliance-llama.node";

export function nodeLlamaCppDir(): string {
  const dir = installedPackageDir("node-llama-cpp");
  if (!dir) throw new Error("node-llama-cpp is not installed");
  return dir;
}

/** The llama.cpp release tag node-llama-cpp was built from (llama/llama.cpp.info.json). */
export function llamaTag(): string {
  const info = JSON.parse(readFileSync(join(nodeLlamaCppDir(), "llama", "llama.cpp.info.json"), "utf8")) as { tag: string };
  return info.tag;
}

/** node-llama-cpp's prebuilt CPU binaries for this platform: the shared libllama/libggml the addon links against. */
export function prebuiltLibDir(): string {
  const name = `${process.platform}-${process.arch}`;
  const pkg = installedPackageDir(`@node-llama-cpp/${name}`);
  if (!pkg) throw new Error(`node-llama-cpp's prebuilt @node-llama-cpp/${name} is not installed`);
  return join(pkg, "bins", name);
}

function sourceHash(): string {
  const h = createHash("sha256");
  for (const f of readdirSync(NATIVE_DIR).filter((f) => /\.(cpp|h)$|^CMakeLists\.txt$/.test(f)).sort()) h.update(f).update(readFileSync(join(NATIVE_DIR, f)));
  return h.digest("hex").slice(0, 10);
}

/** `node_modules/.appliance/mtmd/<tag>-<hash>/`, unless APPLIANCE_MTMD_DIR names the folder holding the addon. */
export function addonBuildDir(): string {
  if (process.env.APPLIANCE_MTMD_DIR) return resolve(process.env.APPLIANCE_MTMD_DIR);
  return join(nodeLlamaCppDir(), "..", ".appliance", "mtmd", `${llamaTag()}-${sourceHash()}`);
}

/** The built addon, or null when it has not been built (install.sh builds it). */
export function builtAddon(): string | null {
  const f = COMPILED ? join(executableLibDir(), ADDON_FILE) : join(addonBuildDir(), ADDON_FILE);
  return existsSync(f) ? f : null;
}

/** libllama / libggml as node-llama-cpp names them: libllama.v0.5.0.so (CPU), libllama.cuda.v0.5.0.so, …, and libggml-base.so. */
const LLAMA_LIB = /^lib(llama|ggml)(\.[a-z0-9_-]+)?\.v\d[\w.]*\.so$|^libggml-base\.so$/;

/** The libllama/libggml files this process has loaded (node-llama-cpp's, for its backend), from /proc/self/maps. */
export function loadedLlamaLibs(maps = readFileSync("/proc/self/maps", "utf8")): string[] {
  const paths = new Set<string>();
  for (const line of maps.split("\n")) {
    const path = line.slice(line.indexOf("/"));
    if (line.includes("/") && LLAMA_LIB.test(basename(path))) paths.add(path);
  }
  // libggml-base first: the others need it
  return [...paths].sort((a, b) => Number(basename(b) === "libggml-base.so") - Number(basename(a) === "libggml-base.so"));
}

/**
 * The addon links no libllama/libggml (each backend's build names them differently): it resolves
 * their symbols from the copies node-llama-cpp loaded, made global here, so clip and the sampler
 * share node-llama-cpp's ggml and its registered backends (CPU, CUDA or Vulkan). Before any model
 * has loaded, the CPU build's libraries are loaded instead, as linking them used to do.
 */
function makeLlamaLibsGlobal(): void {
  const loaded = loadedLlamaLibs();
  if (loaded.length) {
    const failed = dlopenAll(loaded, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
    if (failed.length) throw new Error(`llama addon: could not share node-llama-cpp's libraries: ${failed.map((f) => f.error).join("; ")}`);
    return;
  }
  const dir = prebuiltLibDir();
  const tag = llamaTag();
  const failed = dlopenAll(["libggml-base.so", `libggml.${tag}.so`, `libllama.${tag}.so`].map((f) => join(dir, f)), RTLD_NOW | RTLD_GLOBAL);
  if (failed.length) throw new Error(`llama addon: could not load node-llama-cpp's CPU libraries: ${failed.map((f) => f.error).join("; ")}`);
}

let loaded: unknown;

/** The built addon's exports, loaded once; null when it has not been built. */
export function llamaAddon<T>(): T | null {
  if (loaded) return loaded as T;
  const file = builtAddon();
  if (!file) return null;
  makeLlamaLibsGlobal();
  loaded = require(file);
  return loaded as T;
}
