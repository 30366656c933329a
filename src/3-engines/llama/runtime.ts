import { existsSync, readdirSync } from "node:fs";
import { getLlama, type Llama } from "node-llama-cpp";
import type { Logger } from "../../lib/log";
import { chooseCudaBuild, cudaBuildName, selectCudaBuild } from "./cuda-probe";
import type { ComputeDevice } from "../types";

// One llama.cpp runtime per process. The device is chosen explicitly, with one log line saying
// which, on which GPUs, and why:
// - "cuda": the CUDA build made on this host (./install.sh --cuda-build), node-llama-cpp's CUDA 13
//   build, or its CUDA 12 one, whichever decodes first in a child process (cuda-probe.ts); else the
//   CPU (warned).
// - "vulkan": its Vulkan build where it loads and lists a device, else the CPU (warned).
// - "auto": CUDA on an NVIDIA host where that build loads; else Vulkan where a Vulkan driver is
//   installed and that build lists a device (any vendor's GPU: what only a driver needs); else the CPU.
// ggml's Vulkan backend skips CPU-type devices (Mesa's llvmpipe) unless GGML_VK_VISIBLE_DEVICES
// is set, so "a device" here is a real GPU; the product never sets that variable (the tests do).
// Threads are always set: the library default oversubscribes small boxes.

export type Device = "auto" | "cpu" | "cuda" | "vulkan";

export interface LlamaRuntime {
  llama: Llama;
  device: Exclude<ComputeDevice, "webgpu">;
  /** Names of the GPUs the backend computes on ([] on the CPU). */
  gpus: string[];
  threads: number;
}

type Base = { build: "never"; maxThreads: number; logger: (level: string, message: string) => void; progressLogs: boolean; skipDownload: boolean };

let shared: Promise<LlamaRuntime> | null = null;
let sharedKey = "";

export function llamaRuntime(opts: { device: Device; threads: number; logger: Logger }): Promise<LlamaRuntime> {
  const key = `${opts.device}/${opts.threads}`;
  if (shared && sharedKey === key) return shared;
  sharedKey = key;
  shared = createRuntime(opts).catch((e) => {
    shared = null;
    throw e;
  });
  return shared;
}

async function createRuntime({ device, threads, logger }: { device: Device; threads: number; logger: Logger }): Promise<LlamaRuntime> {
  const log = (level: string, message: string) => {
    const text = message.trim();
    if (!text) return;
    if (level === "error" || level === "fatal") logger.error("llama.cpp", { message: text });
    else if (level === "warn") logger.warn("llama.cpp", { message: text });
  };
  const base: Base = { build: "never", maxThreads: threads, logger: log, progressLogs: false, skipDownload: true };
  const chosen = (llama: Llama, gpu: "cuda" | "vulkan", gpus: string[], reason: string): LlamaRuntime => {
    logger.info("chat engine device", { device: gpu, gpus, threads, reason });
    return { llama, device: gpu, gpus, threads };
  };
  /** Each GPU backend tried, in order, with why it was not used. */
  const skipped: string[] = [];

  const wantCuda = device === "cuda" || (device === "auto" && nvidiaPresent());
  if (wantCuda) {
    const why = device === "cuda" ? 'engines.device = "cuda"' : "auto: NVIDIA device present";
    try {
      // Loading is not enough: a build whose kernels the driver cannot run aborts the process at
      // its first decode (cuda-probe.ts). A child decodes on each CUDA build in turn; this process
      // loads the first that worked.
      const choice = await chooseCudaBuild();
      if (choice.build === null) throw new Error(choice.failed.join("; "));
      selectCudaBuild(choice.build);
      const llama = await getLlama({ ...base, gpu: "cuda" });
      const before = choice.failed.length ? ` (${choice.failed.join("; ")})` : "";
      return chosen(llama, "cuda", await gpuNames(llama), `${why}; ${cudaBuildName(choice.build)} loaded and decoded in a test${before}`);
    } catch (e) {
      skipped.push(`cuda: ${(e as Error).message}`);
      if (device === "cuda") logger.warn("chat engine: CUDA requested but not usable; falling back to CPU", { reason: (e as Error).message });
    }
  }

  const wantVulkan = device === "vulkan" || (device === "auto" && vulkanDriverPresent());
  if (wantVulkan) {
    const why = device === "vulkan" ? 'engines.device = "vulkan"' : `auto: ${skipped.length ? "CUDA not usable, " : "no NVIDIA CUDA, "}a Vulkan driver installed`;
    const tried = await tryVulkan(base);
    if ("llama" in tried) return chosen(tried.llama, "vulkan", tried.gpus, `${why}; node-llama-cpp's Vulkan build lists ${tried.gpus.length} device(s)`);
    skipped.push(`vulkan: ${tried.reason}`);
    if (device === "vulkan") logger.warn("chat engine: Vulkan requested but not usable; falling back to CPU", { reason: tried.reason });
  }

  const llama = await getLlama({ ...base, gpu: false });
  const reason =
    device === "cpu"
      ? 'engines.device = "cpu"'
      : skipped.length
        ? `no usable GPU backend (${skipped.join("; ")})`
        : "auto: no NVIDIA device and no Vulkan driver";
  logger.info("chat engine device", { device: "cpu", gpus: [], threads, reason });
  return { llama, device: "cpu", gpus: [], threads };
}

/** node-llama-cpp's Vulkan prebuilt, when it loads and ggml lists a device in it. */
async function tryVulkan(base: Base): Promise<{ llama: Llama; gpus: string[] } | { reason: string }> {
  let llama: Llama;
  try {
    llama = await getLlama({ ...base, gpu: "vulkan" });
  } catch (e) {
    return { reason: (e as Error).message };
  }
  const gpus = await gpuNames(llama);
  // A loader with no device admitted (only llvmpipe, or a driver that failed) lists none; the
  // build would then put every layer on the CPU behind a Vulkan name.
  if (gpus.length === 0) {
    await llama.dispose().catch(() => {});
    return { reason: "node-llama-cpp's Vulkan build loaded but lists no GPU device (CPU-type devices such as llvmpipe are skipped)" };
  }
  return { llama, gpus };
}

const gpuNames = (llama: Llama) => llama.getGpuDeviceNames().catch(() => [] as string[]);

function nvidiaPresent(): boolean {
  return existsSync("/dev/nvidiactl") || existsSync("/proc/driver/nvidia/version");
}

/** Where the Vulkan loader looks for drivers (ICD manifests); doctor's probe reads the same folders. */
export const VULKAN_ICD_DIRS = ["/etc/vulkan/icd.d", "/usr/share/vulkan/icd.d", "/usr/local/share/vulkan/icd.d"];

/** A Vulkan driver manifest is installed: worth loading the Vulkan build to ask it for devices. */
function vulkanDriverPresent(): boolean {
  return VULKAN_ICD_DIRS.some((d) => {
    try {
      return readdirSync(d).some((f) => f.endsWith(".json"));
    } catch {
      return false;
    }
  });
}
