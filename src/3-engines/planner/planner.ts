import type { Config } from "../../lib/config";
import type { MemoryPlanner } from "../residency";
import { MIN_AUTO_CONTEXT, slotCount, type ModelManifest } from "../../lib/manifest";
import type { LlamaRuntime } from "../llama/runtime";
import { onnxHostFacts } from "../onnx-device";
import type { Logger } from "../../lib/log";
import { discoverDevices, type CommandRunner } from "./devices";
import { fitModel } from "./fit";
import { profileModel } from "./profile";
import type { DeviceInfo, DeviceKind, LoadWants } from "./types";

// The memory planner as the residency manager uses it (issue 28): the devices and their memory
// now (capped by engines.gpu_memory_mb / cpu_memory_mb), each model's profile from its files, and
// what its manifest asks for. Chat models go where the llama runtime computes (CUDA or Vulkan),
// whole or in part, else on the CPU; ONNX models (embeddings, classifier, images) are accounted on
// the device their engine resolves (src/3-engines/onnx-device.ts), which the planner does not move.

export interface PlannerOptions {
  logger: Logger;
  /** The chat engine's llama.cpp runtime, when chat models are served (its backend is the GPU kind, and it dry-runs contexts). */
  runtime?: () => Promise<LlamaRuntime>;
  /** Runs nvidia-smi (tests inject one). */
  run?: CommandRunner;
}

export function createPlanner(config: Pick<Config, "engines" | "models">, o: PlannerOptions): MemoryPlanner {
  const nvidia = onnxHostFacts().nvidia;
  const llama = async () => (o.runtime && config.models.some((m) => m.kind === "chat") ? (await o.runtime()).llama : undefined);
  let warned = "";
  return {
    async devices(): Promise<DeviceInfo[]> {
      const found = await discoverDevices({ gpuBudgetMb: config.engines.gpu_memory_mb, cpuBudgetMb: config.engines.cpu_memory_mb, cuda: nvidia, llama: await llama(), run: o.run });
      const problems = found.problems.join("; ");
      if (problems && problems !== warned) o.logger.warn("memory planner: devices", { problems: found.problems });
      warned = problems;
      return found.devices;
    },
    async profile(m, file) {
      return profileModel(m, file, { llama: m.kind === "chat" ? await llama() : undefined });
    },
    wants: (m, devices) => wantsOf(m, config.engines.device, devices),
    // An auto context's floor is never above what the model was trained for (a model trained for
    // 2,048 tokens gets them).
    fit: (profile, wants, gpus, cpu, name) =>
      fitModel(profile, { ...wants, minContext: Math.min(wants.minContext, profile.trainedContext ?? Infinity) }, gpus, cpu, name),
  };
}

/**
 * What a manifest asks of the planner. A chat model may use the GPU kind the runtime computes on,
 * then the CPU (all of it or the layers that do not fit); `device = "cpu"` keeps it there. An ONNX
 * model is accounted where its engine puts it. Context and slots are the manifest's, or chosen by
 * the planner where it says "auto" (chat).
 */
export function wantsOf(m: ModelManifest, enginesDevice: Config["engines"]["device"], devices: readonly DeviceInfo[]): LoadWants {
  const asked = m.device ?? enginesDevice;
  const has = (k: DeviceKind) => devices.some((d) => d.kind === k);
  let kinds: DeviceKind[];
  if (m.kind === "chat") {
    const gpu = (["cuda", "vulkan"] as const).filter((k) => has(k) && (asked === "auto" || asked === k));
    kinds = asked === "cpu" ? ["cpu"] : [...gpu, "cpu"];
  } else {
    // onnx-device.ts: "cuda" when asked or on an NVIDIA host (auto), with its provider; else the CPU.
    kinds = asked !== "cpu" && asked !== "webgpu" && has("cuda") ? ["cuda"] : ["cpu"];
  }
  const chat = m.kind === "chat";
  // Chat: tokens per slot as the manifest says (default max_context), or auto up to max_context,
  // never below MIN_AUTO_CONTEXT (or max_context when smaller). Image models: the largest image a
  // request may ask for (the profile's; their max_context is the prompt's tokens). Embedding and
  // classifier models: max_context tokens.
  const context = chat && m.context !== undefined ? m.context : m.kind === "image" ? "auto" : m.max_context;
  return {
    devices: kinds,
    gpuLayers: chat ? (m.gpu_layers ?? "auto") : "auto",
    contextSize: context,
    slots: chat ? m.slots : slotCount(m),
    maxContext: m.max_context,
    maxSlots: slotCount(m),
    minContext: Math.min(context === "auto" ? MIN_AUTO_CONTEXT : 256, m.max_context),
  };
}
