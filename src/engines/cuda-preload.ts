import { dlopen, FFIType, ptr } from "bun:ffi";

// onnxruntime's CUDA provider (libonnxruntime_providers_cuda.so) has no RUNPATH, and the RUNPATH
// of libonnxruntime.so.1 that dlopens it does not apply to the provider's own dependencies. A
// library whose soname is already loaded is reused by the dynamic loader, so loading the CUDA
// libraries from the installed lib/cuda (src/build/cuda-libs.ts: cudaPreloadOrder) before the
// first CUDA session lets the provider resolve without LD_LIBRARY_PATH.

const RTLD_NOW = 2;
const RTLD_GLOBAL = 0x100;

/** dlopen()s each path in order; returns the ones that failed with the loader's message. */
export function preloadCudaLibs(paths: string[]): { path: string; error: string }[] {
  if (!paths.length) return [];
  const libc = dlopen("libc.so.6", {
    dlopen: { args: [FFIType.ptr, FFIType.i32], returns: FFIType.ptr },
    dlerror: { args: [], returns: FFIType.cstring },
  });
  const failed: { path: string; error: string }[] = [];
  try {
    for (const path of paths) {
      const name = Buffer.from(`${path}\0`);
      const handle = libc.symbols.dlopen(ptr(name), RTLD_NOW | RTLD_GLOBAL);
      if (!handle) failed.push({ path, error: String(libc.symbols.dlerror() ?? "dlopen failed") });
    }
  } finally {
    libc.close();
  }
  return failed;
}
