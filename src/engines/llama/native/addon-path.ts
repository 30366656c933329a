import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";

// Where the appliance's llama.cpp addon (this folder: image input through llama.cpp's tools/mtmd,
// the CPU threadpool, token sampling) is built and found. The folder name carries the llama.cpp release
// node-llama-cpp ships and a hash of the addon's own sources, so a new node-llama-cpp or a changed
// binding is rebuilt instead of loaded stale. (The parent folder keeps its first name, mtmd: the
// extracted llama.cpp source and the shared build tree live there, and the llama-server bench
// build points at that source.)

export const NATIVE_DIR = import.meta.dir;
export const ADDON_FILE = "appliance-llama.node";

export function nodeLlamaCppDir(): string {
  return dirname(require.resolve("node-llama-cpp/package.json"));
}

/** The llama.cpp release tag node-llama-cpp was built from (llama/llama.cpp.info.json). */
export function llamaTag(): string {
  const info = JSON.parse(readFileSync(join(nodeLlamaCppDir(), "llama", "llama.cpp.info.json"), "utf8")) as { tag: string };
  return info.tag;
}

/** node-llama-cpp's prebuilt CPU binaries for this platform: the shared libllama/libggml the addon links against. */
export function prebuiltLibDir(): string {
  const name = `${process.platform}-${process.arch}`;
  const pkg = dirname(require.resolve(`@node-llama-cpp/${name}/package.json`));
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

/** Set by the executable's build (src/build/executable.ts): its native libraries are in lib/ beside it. */
const COMPILED = process.env.APPLIANCE_COMPILED === "1";

/** The executable's lib/ folder (APPLIANCE_LIB_DIR overrides). */
export function executableLibDir(): string {
  return process.env.APPLIANCE_LIB_DIR ?? join(dirname(process.execPath), "lib");
}

/** The built addon, or null when it has not been built (install.sh builds it unless --no-vision). */
export function builtAddon(): string | null {
  const f = COMPILED ? join(executableLibDir(), ADDON_FILE) : join(addonBuildDir(), ADDON_FILE);
  return existsSync(f) ? f : null;
}

let loaded: unknown;

/** The built addon's exports, loaded once; null when it has not been built. */
export function llamaAddon<T>(): T | null {
  if (loaded) return loaded as T;
  const file = builtAddon();
  if (!file) return null;
  loaded = require(file);
  return loaded as T;
}
