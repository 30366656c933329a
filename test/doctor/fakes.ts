import { join } from "node:path";
import { validateConfig, type Config } from "../../src/lib/config";
import type { Probes } from "../../src/ops/doctor/check";
import type { Served } from "../../src/ops/doctor/engines";
import { gatherCuda, gatherGpus, type CudaFacts, type GpuFacts } from "../../src/ops/doctor/gpu";

// Fake machines for doctor's checks: probes answering as a test says, and the hosts the checks are
// tried on (a CPU-only machine, two H100s with CUDA installed).

export const GiB = 1024 ** 3;
export const MiB = 1024 ** 2;

export type Reply = { code: number; stdout: string; stderr?: string } | "ENOENT";

/** A command runner answering by executable name; anything not listed is not installed. */
export function runner(replies: Record<string, Reply>): Probes["run"] {
  return async (cmd) => {
    const r = replies[cmd[0]!];
    if (r === undefined || r === "ENOENT") throw Object.assign(new Error(`spawn ${cmd[0]} ENOENT`), { code: "ENOENT" });
    return { code: r.code, stdout: r.stdout, stderr: r.stderr ?? "" };
  };
}

/** A CPU-only machine with everything else in order; tests change what they look at. */
export function fakeProbes(over: Partial<Probes> = {}): Probes {
  return {
    run: runner({}),
    env: {},
    nvidiaDevice: () => false,
    readdir: () => [],
    kind: (p) => (p === "/" ? "dir" : "missing"),
    size: () => 0,
    writable: () => true,
    statfs: () => ({ free: 100 * GiB, total: 200 * GiB }),
    readText: () => null,
    cores: () => 4,
    fdLimit: () => ({ soft: 65536, hard: 65536 }),
    store: async () => ({ kind: "sqlite", at: "/data/appliance.sqlite", error: null, schema: 0, known: 16 }),
    listen: async () => null,
    llamaCuda: () => ({ primary: null, fallback: null }),
    cudaSourceBuild: () => null,
    nvcc: () => null,
    cudaDecode: async () => {
      throw new Error("the CUDA decode test ran where the files do not say CUDA");
    },
    llamaVulkan: () => null,
    onnxLibDir: () => null,
    addon: () => ({ path: "/opt/appliance/lib/appliance-llama.node" }),
    // a plan with nothing placed: tests of the memory plan give their own (test/doctor/memory.test.ts)
    memoryPlan: async () => ({ devices: [{ id: "cpu", kind: "cpu", name: "CPU", totalMb: 16384, freeMb: 12000, budgetMb: 16384 }], models: [] }),
    ...over,
  };
}

export const H100 = "0, NVIDIA H100 80GB HBM3, 81559, 580.65.06\n1, NVIDIA H100 80GB HBM3, 81559, 580.65.06\n";
export const MISMATCH = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.95\n";
export const LDCONFIG_CUDA = [
  "1234 libs found in cache `/etc/ld.so.cache'",
  "\tlibcudnn.so.9 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcudnn.so.9",
  "\tlibcublas.so.13 (libc6,x86-64) => /usr/local/cuda-13.0/lib64/libcublas.so.13",
  "\tlibcudart.so.13 (libc6,x86-64) => /usr/local/cuda-13.0/lib64/libcudart.so.13",
  "\tlibcublas.so.12 (libc6,x86-64) => /usr/local/cuda-12.8/lib64/libcublas.so.12",
  "\tlibcudart.so.12 (libc6,x86-64) => /usr/local/cuda-12.8/lib64/libcudart.so.12",
  "\tlibc.so.6 (libc6,x86-64, OS ABI: Linux 3.2.0) => /lib/x86_64-linux-gnu/libc.so.6",
].join("\n");
export const LDCONFIG_PLAIN = "2 libs found in cache `/etc/ld.so.cache'\n\tlibz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libz.so.1\n\tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6\n";
export const LLAMA_CUDA = { primary: "/nm/@node-llama-cpp/linux-x64-cuda/bins/linux-x64-cuda", fallback: null };
export const ONNX_DIR = "/nm/onnxruntime-node/bin/napi-v6/linux/x64";

/** A GPU host: two H100s on driver 580, CUDA 13 and 12 and cuDNN 9 installed, both CUDA builds present. */
export const gpuHost = (over: Partial<Probes> = {}) =>
  fakeProbes({
    run: runner({ "nvidia-smi": { code: 0, stdout: H100 }, ldconfig: { code: 0, stdout: LDCONFIG_CUDA } }),
    nvidiaDevice: () => true,
    llamaCuda: () => LLAMA_CUDA,
    cudaDecode: async () => ({ build: "13", failed: [] }),
    onnxLibDir: () => ONNX_DIR,
    readdir: (d) => (d === ONNX_DIR ? ["libonnxruntime.so.1", "libonnxruntime_providers_shared.so", "libonnxruntime_providers_cuda.so"] : []),
    ...over,
  });

export async function facts(p: Probes): Promise<{ g: GpuFacts; c: CudaFacts }> {
  return { g: await gatherGpus(p), c: await gatherCuda(p) };
}

export const chatModel = { id: "qwen", name: "Qwen", kind: "chat", files: { model: "qwen.gguf" }, max_context: 4096 };
export const embedModel = { id: "minilm", name: "MiniLM", kind: "embedding", files: { model: "minilm" }, max_context: 256 };
/** Configs whose models dir and data dir are under `dir`. */
export const configIn =
  (dir: string) =>
  (raw: Record<string, unknown> = {}): Config => {
    const c = validateConfig(raw);
    c.models_dir = join(dir, "models");
    c.server.data_dir = join(dir, "data");
    return c;
  };
export const served = (c: Config): Served[] => c.models.map((m) => ({ id: m.id, kind: m.kind, device: m.device, vision: m.vision }));
