import { dlopenAll, RTLD_GLOBAL, RTLD_NOW } from "./dlopen";

// onnxruntime's CUDA provider (libonnxruntime_providers_cuda.so) has no RUNPATH, and the RUNPATH
// of libonnxruntime.so.1 that dlopens it does not apply to the provider's own dependencies. A
// library whose soname is already loaded is reused by the dynamic loader, so loading the CUDA
// libraries from the installed lib/cuda (src/build/cuda-libs.ts: cudaPreloadOrder) before the
// first CUDA session lets the provider resolve without LD_LIBRARY_PATH.

/** dlopen()s each path in order; returns the ones that failed with the loader's message. */
export function preloadCudaLibs(paths: string[]): { path: string; error: string }[] {
  return dlopenAll(paths, RTLD_NOW | RTLD_GLOBAL);
}
