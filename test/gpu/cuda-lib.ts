import { existsSync, mkdirSync, symlinkSync } from "node:fs";
import { homedir } from "node:os";
import { join, resolve } from "node:path";
import { CUDA12_BINS, CUDA_SOURCE_BINS } from "../../src/3-engines/installed";
import { shipCuda12Build } from "../../src/ops/build/executable";

// The device check's lib folder (test/gpu/device-check.sh), laid out as the executable's lib/ is
// (src/ops/build/executable.ts) without copying anything: node-llama-cpp's packages linked from
// node_modules, its CUDA 12 build assembled from links (shipCuda12Build), the CUDA source build
// where one is installed or `bun src/ops/build/cuda-source.ts --lib <this folder>` made one, and
// cuBLAS (lib/cuda, where the source build looks for it) linked from where the host has it.
// cuda-bins-preload.ts points node-llama-cpp's CUDA package at these folders.
//   bun test/gpu/cuda-lib.ts DIR [--cublas ROOT]   (prints the builds found, one a line)

const ROOT = resolve(import.meta.dir, "..", "..");
const HOST = `${process.platform}-${process.arch}`;

export interface CudaLib {
  dir: string;
  /** Each build's libggml-cuda.so, null where it is not there. */
  builds: Record<"source" | "13" | "12", string | null>;
}

/** The installed executable's lib/ (install.sh), where `./install.sh --cuda-build` puts its build. */
function installedLib(): string {
  return process.env.APPLIANCE_LIB_DIR ?? join(homedir(), ".local", "lib", "appliance", "current", "lib");
}

export function assembleCudaLib(dir: string, cublasRoot?: string, log: (l: string) => void = (l) => console.error(l)): CudaLib {
  mkdirSync(dir, { recursive: true });
  const link = (target: string, path: string) => {
    if (!existsSync(path)) symlinkSync(target, path);
  };
  link(join(ROOT, "node_modules", "@node-llama-cpp"), join(dir, "@node-llama-cpp"));
  if (cublasRoot) link(resolve(cublasRoot), join(dir, "cuda"));
  if (!existsSync(join(dir, CUDA12_BINS))) shipCuda12Build(dir, log);
  const installed = join(installedLib(), CUDA_SOURCE_BINS);
  if (!existsSync(join(dir, CUDA_SOURCE_BINS)) && existsSync(join(installed, `${HOST}-cuda`, "libggml-cuda.so"))) {
    mkdirSync(join(dir, CUDA_SOURCE_BINS, ".."), { recursive: true });
    link(installed, join(dir, CUDA_SOURCE_BINS));
    log(`cuda-lib: the CUDA source build installed at ${installed}`);
  }
  const lib = (bins: string) => {
    const p = join(bins, `${HOST}-cuda`, "libggml-cuda.so");
    return existsSync(p) ? p : null;
  };
  return {
    dir,
    builds: { source: lib(join(dir, CUDA_SOURCE_BINS)), "13": lib(join(dir, "@node-llama-cpp", `${HOST}-cuda`, "bins")), "12": lib(join(dir, CUDA12_BINS)) },
  };
}

if (import.meta.main) {
  const args = process.argv.slice(2);
  const at = args.indexOf("--cublas");
  const dir = args.find((a, i) => !a.startsWith("--") && !(at >= 0 && i === at + 1));
  if (!dir) {
    console.error("usage: bun test/gpu/cuda-lib.ts DIR [--cublas ROOT]");
    process.exit(2);
  }
  const made = assembleCudaLib(resolve(dir), at >= 0 ? args[at + 1] : undefined);
  for (const [build, lib] of Object.entries(made.builds)) console.log(`${build}\t${lib ?? ""}`);
}
