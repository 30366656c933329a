import { existsSync } from "node:fs";
import { dirname, join } from "node:path";

// Where the engines' native packages are installed. From the checkout (bun test, bun cli/main.ts)
// they resolve from node_modules; the compiled executable keeps them in the lib/ folder beside it
// (src/ops/build/executable.ts) and never looks in node_modules: the bundler turns require.resolve
// into the build checkout's absolute path, which a host running the executable does not have.

/** Set by the executable's build (src/ops/build/executable.ts). */
export const COMPILED = process.env.APPLIANCE_COMPILED === "1";

/** The executable's lib/ folder (APPLIANCE_LIB_DIR overrides). */
export function executableLibDir(): string {
  return process.env.APPLIANCE_LIB_DIR ?? join(dirname(process.execPath), "lib");
}

/** A package's folder ("onnxruntime-node", "@node-llama-cpp/linux-x64-cuda"), or null when it is not installed. */
export function installedPackageDir(pkg: string): string | null {
  if (COMPILED) {
    const dir = join(executableLibDir(), pkg);
    return existsSync(join(dir, "package.json")) ? dir : null;
  }
  try {
    return dirname(require.resolve(`${pkg}/package.json`));
  } catch {
    return null;
  }
}

/** Under lib/: node-llama-cpp's CUDA 12 build, assembled by the executable's build (src/ops/build/executable.ts). */
export const CUDA12_BINS = "llama-cuda12/bins";

/** Under lib/: llama.cpp's CUDA backend built on this host (`./install.sh --cuda-build`, src/ops/build/cuda-source.ts). */
export const CUDA_SOURCE_BINS = "llama-cuda-source/bins";

/**
 * Makes the executable's node-llama-cpp CUDA package offer its CUDA 12 build ("12") or the source
 * build ("source") instead of the CUDA 13 one; read each time node-llama-cpp asks
 * (src/ops/build/plugins.ts, llama/cuda-probe.ts).
 */
export const CUDA_BUILD_ENV = "APPLIANCE_LLAMA_CUDA_BUILD";
