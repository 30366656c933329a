import type { CudaChoice } from "../../3-engines/llama/cuda-probe";
import type { Config } from "../../lib/config";
import type { MemoryPlan } from "../../3-engines/planner/plan-all";
import type { CommandRunner } from "../../2-services/rentals/inventory";
import type { FdLimit } from "../../lib/net/rlimit";
import type { StoreFacts } from "./store-probe";

// What `appliance doctor` reports: one line per check. Every check is a plain function of what was
// probed (Probes, or facts gathered from it), so a test can feed it any machine it likes.

export type Status = "ok" | "warn" | "fail";

export interface Check {
  name: string;
  status: Status;
  /** One line (a config error may add indented lines). */
  detail: string;
  /** What to do about it; only on warn and fail. */
  hint?: string;
}

/** Everything the checks learn about the machine; systemProbes() is the real one. */
export interface Probes {
  /** Runs nvidia-smi and ldconfig; a missing executable throws with `code: "ENOENT"`. */
  run: CommandRunner;
  env: Record<string, string | undefined>;
  /** /dev/nvidiactl or /proc/driver/nvidia/version: the test runtime.ts and onnx-device.ts make. */
  nvidiaDevice(): boolean;
  /** File names in a folder; [] when it cannot be read. */
  readdir(dir: string): string[];
  kind(path: string): "file" | "dir" | "missing";
  /** Bytes: a file's size, a folder's files added up. */
  size(path: string): number;
  writable(path: string): boolean;
  statfs(path: string): { free: number; total: number };
  readText(path: string): string | null;
  cores(): number;
  /** This process's limit on open file descriptors (src/lib/net/rlimit.ts); null where it cannot be read. */
  fdLimit(): FdLimit | null;
  /** Listens on host:port and closes again: null when that worked, else the error code. */
  listen(host: string, port: number): Promise<string | null>;
  /** Folders holding libggml-cuda.so in node-llama-cpp's CUDA prebuilt packages (null: not installed). */
  llamaCuda(): { primary: string | null; fallback: string | null };
  /**
   * llama.cpp's CUDA backend built on this host (`./install.sh --cuda-build`: its record in
   * lib/llama-cuda-source), and the nvcc that could build one; null where there is none.
   */
  cudaSourceBuild(): { archs: string[]; nvcc: string; built_at: string; dir: string } | null;
  nvcc(): { path: string; version: string } | null;
  /**
   * The chat runtime's CUDA decode test (llama/cuda-probe.ts: a child process decodes on each CUDA
   * build in turn); run only where the prediction is CUDA.
   */
  cudaDecode(): Promise<CudaChoice>;
  /** Folder holding libggml-vulkan.so in node-llama-cpp's Vulkan prebuilt package (null: not installed). */
  llamaVulkan(): string | null;
  /** The folder holding libonnxruntime.so.1 (where its CUDA provider files must be). */
  onnxLibDir(): string | null;
  /** The multimodal addon: its path when built, else null (error: its folder could not be worked out). */
  addon(): { path: string | null; error?: string };
  /**
   * Where the config's models would go (src/3-engines/planner/plan-all.ts) on the devices as they are now;
   * `vulkan`: the chat engine will compute on Vulkan, so its runtime is loaded to read that device.
   */
  memoryPlan(config: Config, vulkan: boolean): Promise<MemoryPlan>;
  /** The configured store, read without changing it (./store-probe.ts). */
  store(config: Config): Promise<StoreFacts>;
}

export const ok = (name: string, detail: string): Check => ({ name, status: "ok", detail });
export const warn = (name: string, detail: string, hint: string): Check => ({ name, status: "warn", detail, hint });
export const fail = (name: string, detail: string, hint: string): Check => ({ name, status: "fail", detail, hint });

export function formatBytes(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return i === 0 ? `${n} B` : `${n < 10 ? n.toFixed(1) : Math.round(n)} ${units[i]}`;
}

export const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`;
