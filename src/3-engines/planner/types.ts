import type { ModelKind } from "../../lib/manifest";

// The memory planner's vocabulary (issue 28). A model's *profile* is read once from its files' own
// metadata (GGUF header and tensor table; ONNX graphs' sizes and configs) without loading weights,
// and answers "how much memory, where, with these settings". *Fitting* chooses the settings the
// config left to `auto` so a model fits the memory a device has for it, or says how much is
// missing. Devices report their memory (nvidia-smi, the Vulkan backend's VRAM state, the host's
// RAM). The residency manager (src/3-engines/residency.ts) decides which models stay loaded and
// calls these; nothing here loads a model or keeps state.

export type DeviceKind = "cpu" | "cuda" | "vulkan";

/** A device models can be placed on, and its memory. MB are 2^20 bytes. */
export interface DeviceInfo {
  /** "cpu", "cuda:0", "vulkan:0" (the backend's device index). */
  id: string;
  kind: DeviceKind;
  name: string;
  /** The GPU's UUID as nvidia-smi prints it (CUDA devices): rentals name GPUs by it. */
  uuid?: string;
  totalMb: number;
  /** Free now, as the device reports it. */
  freeMb: number;
  /** What the appliance's models may hold on it in all: the total, or less where the config caps it. */
  budgetMb: number;
  /** Vulkan: the largest tensor ggml can run an operation on there, bytes (devices.ts); absent: no known limit. */
  maxTensorBytes?: number;
}

/** Memory a model takes with given settings. */
export interface Footprint {
  /** On the GPU (0 when the model computes on the CPU). */
  gpuMb: number;
  /** Host RAM: weights not offloaded, CPU-side caches and buffers. */
  cpuMb: number;
  /** The parts, for doctor and `appliance ps`; they add up to gpuMb + cpuMb. */
  parts: { weightsMb: number; cacheMb: number; computeMb: number; projectorMb: number };
}

/** Settings a model is loaded with; the planner's choice where the config said `auto`. */
export interface LoadSettings {
  /** Where it computes: "cpu" or a GPU kind (the device id is the placement's). */
  device: DeviceKind;
  /** Chat: layers offloaded (0 on the CPU); others: 0 on the CPU, `layers` on a GPU. */
  gpuLayers: number;
  /** Chat: tokens per slot. Others: their own fixed size (max tokens / image side). */
  contextSize: number;
  slots: number;
}

/** What a model's files say it needs, ready to be asked about any settings. */
export interface ModelProfile {
  kind: ModelKind;
  /** Offloadable layers (chat: the GGUF's block count + the output layer as llama.cpp counts it; others: 1). */
  layers: number;
  /** The context the model was trained for (chat), if the file says. */
  trainedContext?: number;
  /** Bytes of the weights on disk (all files). */
  fileBytes: number;
  /** Memory with these settings. */
  footprint(s: LoadSettings): Promise<Footprint>;
  /** The GPU kind of the runtime the profile was read for (chat: the llama.cpp build): a CPU placement there still holds footprint.gpuMb on that GPU. */
  runtimeGpu?: DeviceKind;
  /** The largest tensor a GPU placement with these settings allocates on the device (chat: one layer's K or V cache for every slot), bytes. */
  largestTensorBytes?(s: LoadSettings): number;
}

/** What the config asks for; `auto` lets the planner choose. */
export interface LoadWants {
  /** Devices the model may use, in order of preference ("cpu" last, when allowed). */
  devices: DeviceKind[];
  gpuLayers: number | "auto";
  /** Tokens per slot, or auto: the most that fits, up to min(trained context, maxContext). */
  contextSize: number | "auto";
  slots: number | "auto";
  /** Ceiling for an auto context (the config's maximum). */
  maxContext: number;
  /** Ceiling for auto slots. */
  maxSlots: number;
  /** Floor for an auto context: below it the model is refused rather than loaded uselessly small. */
  minContext: number;
}

/** A device's memory as one model may have it: what is free for it there. */
export interface Room {
  device: DeviceInfo;
  availableMb: number;
}

export type Fit =
  | {
      ok: true;
      device: string;
      settings: LoadSettings;
      footprint: Footprint;
      /** Where footprint.gpuMb lies when not on `device` (a CPU placement inside a GPU runtime holds llama.cpp's compute buffer there). */
      gpuDevice?: string;
    }
  | {
      ok: false;
      /** MB missing on the closest device (GPU, or host RAM for the CPU) with the smallest settings allowed. */
      missingMb: number;
      /** A sentence: what was tried, on which device, how much it needs and how much there is. */
      reason: string;
    };
