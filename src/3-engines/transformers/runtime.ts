import "../onnx-telemetry"; // before ONNX Runtime starts: no telemetry, no mat-debug log
// transformers.js, loaded on first use and set to local files only (platform notes): no remote
// lookups, no file cache of its own; a model is an absolute folder path (which transformers.js
// reads as a local directory, so env.localModelPath is not needed and nothing global is shared
// with other engines that load their own folders).

import type { OnnxBackend } from "../onnx-device";

type Transformers = typeof import("@huggingface/transformers");
let loaded: Promise<Transformers> | null = null;

export function transformersRuntime(): Promise<Transformers> {
  loaded ??= import("@huggingface/transformers").then((t) => {
    t.env.allowRemoteModels = false;
    t.env.allowLocalModels = true;
    t.env.useFSCache = false;
    t.env.useBrowserCache = false;
    t.env.logLevel = t.LogLevel.ERROR;
    return t;
  });
  return loaded;
}

/**
 * ONNX Runtime session options: the device's provider and explicit thread counts (platform rule:
 * always set threads). On CUDA and WebGPU, nodes the provider has no kernel for run on the CPU
 * (ONNX Runtime's own placement); the model as a whole never falls back from WebGPU.
 */
export function sessionOptions(device: OnnxBackend, threads: number) {
  return {
    executionProviders: device === "cpu" ? ["cpu"] : [{ name: device }],
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    graphOptimizationLevel: "all" as const,
  };
}
