import { dlopen, FFIType, ptr } from "bun:ffi";
import { afterAll, beforeAll } from "bun:test";
import type { Llama } from "node-llama-cpp";

// ggml's Vulkan backend reads GGML_VK_VISIBLE_DEVICES with getenv() when it starts; Bun's
// process.env does not reach the C environment, so the tests set it through libc. Test setup
// only: the product never admits a CPU-type device (web/docs/gpu.md).

const libc = dlopen("libc.so.6", {
  setenv: { args: [FFIType.cstring, FFIType.cstring, FFIType.i32], returns: FFIType.i32 },
  unsetenv: { args: [FFIType.cstring], returns: FFIType.i32 },
});
const cstr = (s: string) => ptr(Buffer.from(`${s}\0`));

function setEnv(name: string, value: string | undefined) {
  if (value === undefined) {
    delete process.env[name];
    libc.symbols.unsetenv(cstr(name));
  } else {
    process.env[name] = value;
    libc.symbols.setenv(cstr(name), cstr(value), 1);
  }
}

/**
 * Admits Mesa's llvmpipe (device 0) to ggml's Vulkan backend in this process, as the tests need
 * on a machine without a GPU; returns what puts the environment back.
 */
export function admitLlvmpipe(): () => void {
  const vars: Record<string, string> = { GGML_VK_VISIBLE_DEVICES: "0", XDG_RUNTIME_DIR: process.env.XDG_RUNTIME_DIR ?? "/tmp" };
  const saved = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
  for (const [k, v] of Object.entries(vars)) setEnv(k, v);
  return () => {
    for (const [k, v] of Object.entries(saved)) setEnv(k, v);
  };
}

export const LLVMPIPE_ENV = { GGML_VK_VISIBLE_DEVICES: "0" };

/**
 * node-llama-cpp's Vulkan build on llvmpipe in this process (after admitLlvmpipe), its log lines
 * (info and up) appended to `lines`: how the planner's Vulkan tests read llama.cpp's allocations.
 */
export async function llvmpipeLlama(lines: string[]): Promise<Llama> {
  const { getLlama, LlamaLogLevel } = await import("node-llama-cpp");
  return getLlama({ gpu: "vulkan", build: "never", skipDownload: true, progressLogs: false, maxThreads: 2, logLevel: LlamaLogLevel.info, logger: (_level, message) => lines.push(message) });
}

/**
 * llvmpipe for the tests of a file: admitted and node-llama-cpp's Vulkan build loaded before them
 * (`llama()`, its log lines in `lines`), disposed and the environment put back after them.
 */
export function llvmpipeForTests(): { lines: string[]; llama: () => Llama } {
  const lines: string[] = [];
  let llama: Llama | undefined;
  let restore: () => void = () => {};
  beforeAll(async () => {
    restore = admitLlvmpipe();
    llama = await llvmpipeLlama(lines);
  }, 60_000);
  afterAll(async () => {
    await llama?.dispose();
    restore();
  });
  return { lines, llama: () => llama! };
}
