// Shared settings of the chat benchmark (issue "chat engine"): the ~65M-parameter Q8_0 qwen3
// model, 2 threads, 4 slots, short prompts (so prefill noise does not swamp a 5 ms budget),
// 64 generated tokens, thinking off.
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";

export const BENCH = {
  preset: "bench-64m" as const,
  threads: Number(process.env.BENCH_THREADS ?? 2),
  slots: Number(process.env.BENCH_SLOTS ?? 4),
  contextSize: 1024,
  maxTokens: 64,
  rounds: Number(process.env.BENCH_ROUNDS ?? 15),
  /** A distinct prompt per stream and round, so no slot reuses another's cache. */
  prompt: (n: number) => `Request ${n}. Please write a short paragraph about the history of bridges and how they are built.`,
};

/**
 * BENCH_DEVICE (cpu by default; cuda, vulkan): where the benches that run our server beside
 * llama-server (vs-llama-server, fairness) put the model. Ours gets `engines.device` (its planner
 * offloads every layer that fits, gpu_layers "auto"); llama-server gets `-ngl 999` and loads the
 * matching ggml backend. It is built against node-llama-cpp's CPU libraries
 * (llama-server-build.ts), and ggml loads the CUDA and Vulkan backends as libraries of their own
 * (libggml-cuda.so, libggml-vulkan.so): GGML_BACKEND_PATH names the one to load
 * (ggml_backend_load_all, ggml-backend-reg.cpp), its libggml-base.so being the one already loaded
 * (the same file in every node-llama-cpp package). BENCH_GGML_BACKEND names another library, e.g.
 * the CUDA source build's or the CUDA 12 build's (test/gpu/device-check.sh passes the build that
 * decoded). From the checkout our server runs node-llama-cpp's CUDA 13 build unless the device
 * check's preload (test/gpu/cuda-bins-preload.ts) names another. On a machine without a GPU,
 * BENCH_DEVICE=vulkan runs on Mesa's llvmpipe where GGML_VK_VISIBLE_DEVICES=0 admits it.
 */
export type BenchDevice = "cpu" | "cuda" | "vulkan";

export function benchDevice(): BenchDevice {
  const d = process.env.BENCH_DEVICE ?? "cpu";
  if (d !== "cpu" && d !== "cuda" && d !== "vulkan") throw new Error(`BENCH_DEVICE: cpu, cuda or vulkan, not "${d}"`);
  return d;
}

/** node-llama-cpp's library of a GPU backend (its CUDA 13 or Vulkan package), or BENCH_GGML_BACKEND. */
export function ggmlBackendLibrary(device: Exclude<BenchDevice, "cpu">): string {
  const given = process.env.BENCH_GGML_BACKEND;
  const host = `${process.platform}-${process.arch}`;
  const lib = given ?? join(dirname(require.resolve(`@node-llama-cpp/${host}-${device}/package.json`)), "bins", `${host}-${device}`, `libggml-${device}.so`);
  if (!existsSync(lib)) throw new Error(`BENCH_DEVICE=${device}: llama-server's backend library ${lib} is not there`);
  return lib;
}

/**
 * llama-server's arguments and environment for `device`: nothing added on the CPU (as before the
 * switch); on a GPU every layer offloaded and the backend library loaded.
 */
export function llamaServerOnDevice(device: BenchDevice): { args: string[]; env: Record<string, string | undefined> | undefined } {
  if (device === "cpu") return { args: [], env: undefined };
  return { args: ["-ngl", "999"], env: { ...process.env, GGML_BACKEND_PATH: ggmlBackendLibrary(device) } };
}

/**
 * The devices llama-server sees with `env` (its --list-devices): a GPU run that would quietly run
 * llama-server on the CPU (its backend library not loaded) stops here with ggml's own reason.
 */
export function llamaServerDevices(bin: string, env: Record<string, string | undefined>): string[] {
  const r = Bun.spawnSync([bin, "--list-devices"], { env, stdout: "pipe", stderr: "pipe" });
  const text = `${r.stdout.toString()}\n${r.stderr.toString()}`;
  const devices = text.split("\n").flatMap((l) => /^\s+(\S+): (.+)$/.exec(l)?.slice(1, 3).join(": ") ?? []);
  if (!devices.length) {
    const why = text.split("\n").filter((l) => / E |error|failed/i.test(l)).map((l) => l.trim()).slice(0, 3).join("; ");
    throw new Error(`llama-server lists no device with GGML_BACKEND_PATH=${env.GGML_BACKEND_PATH}${why ? `: ${why}` : ""}`);
  }
  return devices;
}
