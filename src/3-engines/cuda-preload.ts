import { existsSync } from "node:fs";
import { join } from "node:path";
import { dlopenAll, RTLD_GLOBAL, RTLD_NOW } from "./dlopen";

// onnxruntime's CUDA provider (libonnxruntime_providers_cuda.so) has no RUNPATH, and the RUNPATH
// of libonnxruntime.so.1 that dlopens it does not apply to the provider's own dependencies. A
// library whose soname is already loaded is reused by the dynamic loader, so loading the CUDA
// libraries from the installed lib/cuda (cudaPreloadOrder below; src/ops/build/cuda-libs.ts fetches them) before the
// first CUDA session lets the provider resolve without LD_LIBRARY_PATH.

/** dlopen()s each path in order; returns the ones that failed with the loader's message. */
export function preloadCudaLibs(paths: string[]): { path: string; error: string }[] {
  return dlopenAll(paths, RTLD_NOW | RTLD_GLOBAL);
}

/** The installed lib/ folder that holds the CUDA libraries install.sh --cuda fetches. */
export const CUDA_DIR = "cuda";

/**
 * The onnxruntime CUDA provider has no RUNPATH: its libraries must already be loaded when
 * onnxruntime dlopens it (a loaded soname is reused). Full paths, in dependency order.
 */
export function cudaPreloadOrder(lib: string): string[] {
  const dir = join(lib, CUDA_DIR);
  const order = ["libcudart.so.13", "libnvJitLink.so.13", "libnvrtc.so.13", "libcublasLt.so.13", "libcublas.so.13", "libcurand.so.10", "libcudnn_graph.so.9", "libcudnn.so.9"];
  return order.map((so) => join(dir, so)).filter((p) => existsSync(p));
}
