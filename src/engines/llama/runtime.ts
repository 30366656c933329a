import { existsSync } from "node:fs";
import { getLlama, type Llama } from "node-llama-cpp";
import type { Logger } from "../../log";

// One llama.cpp runtime per process. The device is chosen explicitly: CUDA when asked for (or,
// with "auto", when an NVIDIA device is present) and loadable, else the CPU, with a log line
// saying which and why. Threads are always set: the library default oversubscribes small boxes.

export type Device = "auto" | "cpu" | "cuda";

export interface LlamaRuntime {
  llama: Llama;
  device: "cpu" | "cuda";
  threads: number;
}

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
  const base = { build: "never" as const, maxThreads: threads, logger: log, progressLogs: false, skipDownload: true };
  const wantCuda = device === "cuda" || (device === "auto" && nvidiaPresent());
  if (wantCuda) {
    try {
      const llama = await getLlama({ ...base, gpu: "cuda" });
      logger.info("chat engine device", { device: "cuda", threads, gpus: await llama.getGpuDeviceNames().catch(() => []) });
      return { llama, device: "cuda", threads };
    } catch (e) {
      logger.warn("chat engine: CUDA requested but not usable; falling back to CPU", { reason: (e as Error).message });
    }
  }
  const llama = await getLlama({ ...base, gpu: false });
  logger.info("chat engine device", { device: "cpu", threads, reason: wantCuda ? "cuda unavailable" : device === "cpu" ? "configured" : "no NVIDIA device" });
  return { llama, device: "cpu", threads };
}

function nvidiaPresent(): boolean {
  return existsSync("/dev/nvidiactl") || existsSync("/proc/driver/nvidia/version");
}
