import { dlopen as ffiOpen, FFIType, ptr } from "bun:ffi";

// libc's dlopen, for the shared libraries the engines need in the process's global scope: the
// CUDA libraries onnxruntime's provider looks up by soname (cuda-preload.ts), and the libllama /
// libggml copies node-llama-cpp loaded, which the llama addon resolves its symbols from.

export const RTLD_NOW = 2;
export const RTLD_NOLOAD = 4;
export const RTLD_GLOBAL = 0x100;

/** dlopen()s each path in order with `flags`; returns the ones that failed with the loader's message. */
export function dlopenAll(paths: string[], flags: number): { path: string; error: string }[] {
  if (!paths.length) return [];
  const libc = ffiOpen("libc.so.6", {
    dlopen: { args: [FFIType.ptr, FFIType.i32], returns: FFIType.ptr },
    dlerror: { args: [], returns: FFIType.cstring },
  });
  const failed: { path: string; error: string }[] = [];
  try {
    for (const path of paths) {
      const name = Buffer.from(`${path}\0`);
      const handle = libc.symbols.dlopen(ptr(name), flags);
      if (!handle) failed.push({ path, error: String(libc.symbols.dlerror() ?? "dlopen failed") });
    }
  } finally {
    libc.close();
  }
  return failed;
}
