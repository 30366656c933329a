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

/**
 * APPLIANCE_TEST_DEVICE (cpu, vulkan, cuda; unset by default): the device chatTestApp runs its chat
 * models on, over what a test asked (test/helpers/chat.ts), so that the suite's chat tests can run
 * on a GPU (test/gpu/device-check.sh). When it is set, admitLlvmpipe leaves the environment alone:
 * the device is a real GPU (or llvmpipe where the environment already admits it).
 */
export function testDeviceOverride(): "cpu" | "vulkan" | "cuda" | undefined {
  const d = process.env.APPLIANCE_TEST_DEVICE;
  if (!d) return undefined;
  if (d === "cpu" || d === "vulkan" || d === "cuda") return d;
  throw new Error(`APPLIANCE_TEST_DEVICE: cpu, vulkan or cuda, not "${d}"`);
}

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
 * on a machine without a GPU; returns what puts the environment back. A no-op under
 * APPLIANCE_TEST_DEVICE (above).
 */
export function admitLlvmpipe(): () => void {
  if (testDeviceOverride()) return () => {};
  const vars: Record<string, string> = { GGML_VK_VISIBLE_DEVICES: "0", XDG_RUNTIME_DIR: process.env.XDG_RUNTIME_DIR ?? "/tmp" };
  const saved = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
  for (const [k, v] of Object.entries(vars)) setEnv(k, v);
  return () => {
    for (const [k, v] of Object.entries(saved)) setEnv(k, v);
  };
}

export const LLVMPIPE_ENV: Record<string, string> = testDeviceOverride() ? {} : { GGML_VK_VISIBLE_DEVICES: "0" };

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
