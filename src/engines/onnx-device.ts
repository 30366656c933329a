import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import type { Logger } from "../log";
import type { Device } from "./llama/runtime";

// The device for ONNX Runtime sessions, chosen explicitly (platform notes: transformers.js's
// "auto"/"gpu" resolve to CUDA on Linux and fail without the provider, with no CPU fallback).
// CUDA needs the provider libraries beside libonnxruntime.so.1; onnxruntime-node's install script
// (which would download them) is blocked, so a GPU host copies them in (README "GPU hosts").

export const CUDA_PROVIDER_FILES = ["libonnxruntime_providers_shared.so", "libonnxruntime_providers_cuda.so"];

/** The folder holding libonnxruntime.so.1 (where the CUDA provider files must be put). */
export function onnxRuntimeLibDir(): string | null {
  try {
    const require = createRequire(import.meta.url);
    const pkg = dirname(require.resolve("onnxruntime-node/package.json"));
    for (const napi of ["napi-v6", "napi-v3"]) {
      const dir = join(pkg, "bin", napi, "linux", process.arch);
      if (existsSync(join(dir, "libonnxruntime.so.1"))) return dir;
    }
  } catch {}
  return null;
}

export function cudaProviderPresent(dir = onnxRuntimeLibDir()): boolean {
  return dir !== null && CUDA_PROVIDER_FILES.every((f) => existsSync(join(dir, f)));
}

function nvidiaPresent(): boolean {
  return existsSync("/dev/nvidiactl") || existsSync("/proc/driver/nvidia/version");
}

/** "cuda" only when asked (or "auto" on an NVIDIA host) and the provider files are there; logged either way. */
export function resolveOnnxDevice(wanted: Device, modelId: string, logger: Logger): "cpu" | "cuda" {
  const dir = onnxRuntimeLibDir();
  const provider = cudaProviderPresent(dir);
  if (wanted === "cpu") {
    logger.info("onnx device", { model: modelId, device: "cpu", reason: "configured" });
    return "cpu";
  }
  if (wanted === "cuda" || nvidiaPresent()) {
    if (provider) {
      logger.info("onnx device", { model: modelId, device: "cuda" });
      return "cuda";
    }
    logger.warn("onnx device: CUDA wanted but the onnxruntime CUDA provider is missing; using CPU", {
      model: modelId,
      missing: CUDA_PROVIDER_FILES.map((f) => join(dir ?? "<onnxruntime-node>/bin", f)),
    });
    return "cpu";
  }
  logger.info("onnx device", { model: modelId, device: "cpu", reason: "no NVIDIA device" });
  return "cpu";
}
