import type { LoadedConfig } from "../../lib/config";
import { DEMO_GENERATORS } from "../demo";
import { fail, ok, type Check, type Probes } from "./check";
import { probeWebGpu } from "../../3-engines/onnx-device";
import { chatBackend, checkChatDecoding, checkChatEngine, checkImageInput, checkOnnxEngines, checkThreads, type Served } from "./engines";
import { checkDataDir, checkDisk, checkModels, checkPort } from "./files";
import { checkMemoryPlan } from "./memory";
import { checkTlsCert } from "./tls";
import { checkFdLimit } from "./limits";
import { checkStore } from "./store";
import { checkCudaRuntime, checkCudaSourceBuild, checkGpus, gatherCuda, gatherGpus } from "./gpu";
import { checkVulkan, gatherVulkan } from "./vulkan";

// `appliance doctor`: every check, in the order an operator fixes things. A config that does not
// load still gets the machine checks (GPUs, CUDA); the rest need the config.

export interface DoctorReport {
  ok: boolean;
  checks: Check[];
}

/** The demo models `serve --demo` would add on this install, one entry per kind (and vision). */
export function demoServed(generators = DEMO_GENERATORS): Served[] {
  const out: Served[] = [];
  for (const g of generators) {
    if (!(g.available?.() ?? true)) continue;
    const id = `demo ${g.kind}`;
    if (!out.some((s) => s.id === id)) out.push({ id, kind: g.kind });
  }
  return out;
}

export async function runDoctor(load: () => LoadedConfig, probes: Probes, demo: () => Served[] = demoServed): Promise<DoctorReport> {
  let loaded: LoadedConfig | null = null;
  let configCheck: Check;
  try {
    loaded = load();
    configCheck = ok("config", loaded.file ?? "built-in defaults (no config file)");
  } catch (e) {
    configCheck = fail("config", (e as Error).message, "fix the config; `appliance config check` validates it");
  }
  const [gpus, cuda, vulkan] = await Promise.all([gatherGpus(probes), gatherCuda(probes), gatherVulkan(probes)]);
  const checks = [configCheck, checkGpus(gpus), checkCudaRuntime(gpus, cuda), checkCudaSourceBuild(gpus, probes.cudaSourceBuild(), probes.nvcc()), checkVulkan(vulkan), checkFdLimit(probes.fdLimit())];
  if (loaded) {
    const { config } = loaded;
    const served: Served[] = [
      ...config.models.map((m) => ({ id: m.id, kind: m.kind, device: m.device, vision: m.vision, batchSize: m.batch_size })),
      ...(config.demo ? demo() : []),
    ];
    const addon = probes.addon();
    // onnxruntime's WebGPU adapter is probed only when a model asks for it (a one-node session),
    // and CUDA's decode test only runs where the files say CUDA (a child decodes on a tiny model).
    const webgpu = served.some((m) => m.device === "webgpu") ? await probeWebGpu() : undefined;
    const backend = chatBackend(config.engines.device, gpus, cuda, vulkan).device;
    const decode = backend === "cuda" ? await probes.cudaDecode() : undefined;
    const plan = await probes.memoryPlan(config, backend === "vulkan" && config.models.some((m) => m.kind === "chat")).catch((e: Error) => ({ error: e.message }));
    checks.push(
      checkChatEngine(config, served, gpus, cuda, vulkan, decode),
      checkOnnxEngines(config, served, gpus, cuda, webgpu),
      checkImageInput(addon, served),
      checkChatDecoding(addon, served),
      checkThreads(config, probes.cores()),
      ...checkModels(config, probes),
      checkMemoryPlan(plan),
      checkStore(config, await probes.store(config)),
      checkDataDir(config.server.data_dir, probes),
      checkDisk(config.server.data_dir, probes),
      await checkPort(config.server, probes),
    );
    // loadConfig resolved a relative path against the config file's folder
    if (config.server.tls) checks.push(checkTlsCert(config.server.tls.cert, probes));
  }
  return { ok: checks.every((c) => c.status !== "fail"), checks };
}
