import { existsSync } from "node:fs";
import { join } from "node:path";
import { ApiError } from "../lib/errors";
import type { Logger } from "../lib/log";
import { cudaPreloadOrder, preloadCudaLibs } from "./cuda-preload";
import { executableLibDir, installedPackageDir } from "./installed";

// The device for ONNX Runtime sessions, chosen explicitly (platform notes: transformers.js's
// "auto"/"gpu" resolve to CUDA on Linux and fail without the provider, with no CPU fallback).
// CUDA needs the provider libraries beside libonnxruntime.so.1; onnxruntime-node's install script
// (which would download them) is blocked, so a GPU host copies them in (web/docs/gpu.md).
// WebGPU (Dawn over Vulkan) is bundled with onnxruntime-node 1.30 on linux-x64; it is used only
// when a model asks for it: "auto" never picks it until it has been verified on a real GPU.

/** What a model (or `[engines] device`) may ask of ONNX Runtime. */
export type OnnxDevice = "auto" | "cpu" | "cuda" | "webgpu";
/** Where an ONNX model's sessions are created. */
export type OnnxBackend = "cpu" | "cuda" | "webgpu";

export const CUDA_PROVIDER_FILES = ["libonnxruntime_providers_shared.so", "libonnxruntime_providers_cuda.so"];

/** The folder holding libonnxruntime.so.1 (where the CUDA provider files must be put). */
export function onnxRuntimeLibDir(): string | null {
  const pkg = installedPackageDir("onnxruntime-node");
  if (!pkg) return null;
  for (const napi of ["napi-v6", "napi-v3"]) {
    const dir = join(pkg, "bin", napi, "linux", process.arch);
    if (existsSync(join(dir, "libonnxruntime.so.1"))) return dir;
  }
  return null;
}

export function cudaProviderPresent(dir = onnxRuntimeLibDir()): boolean {
  return dir !== null && CUDA_PROVIDER_FILES.every((f) => existsSync(join(dir, f)));
}

function nvidiaPresent(): boolean {
  return existsSync("/dev/nvidiactl") || existsSync("/proc/driver/nvidia/version");
}

/** What the decision looks at; tests pass their own. */
export interface OnnxHostFacts {
  nvidia: boolean;
  /** The folder holding libonnxruntime.so.1, null when not found. */
  libDir: string | null;
  cudaProvider: boolean;
}

export function onnxHostFacts(): OnnxHostFacts {
  const libDir = onnxRuntimeLibDir();
  return { nvidia: nvidiaPresent(), libDir, cudaProvider: cudaProviderPresent(libDir) };
}

/**
 * The backend for one model, logged either way. `wanted` is the manifest's `device`, else
 * `[engines] device`; that may say "vulkan" (a chat-engine backend), which for ONNX models means
 * what "auto" means. "cuda" only when asked (or "auto" on an NVIDIA host) and the provider files
 * are there; "webgpu" only when asked — whether an adapter exists is found at load (probeWebGpu).
 */
export function resolveOnnxDevice(
  wanted: OnnxDevice | "vulkan",
  modelId: string,
  logger: Logger,
  facts: OnnxHostFacts = onnxHostFacts(),
): OnnxBackend {
  if (wanted === "vulkan") logger.info("onnx device: vulkan is a chat-engine backend; ONNX models take it as auto", { model: modelId });
  const asked = wanted === "vulkan" ? "auto" : wanted;
  if (asked === "cpu") {
    logger.info("onnx device", { model: modelId, device: "cpu", reason: "configured" });
    return "cpu";
  }
  if (asked === "webgpu") {
    logger.info("onnx device", { model: modelId, device: "webgpu", reason: "configured" });
    return "webgpu";
  }
  if (asked === "cuda" || facts.nvidia) {
    if (facts.cudaProvider) {
      const failed = preloadInstalledCuda();
      if (failed) {
        logger.warn("onnx device: the CUDA libraries install.sh put in lib/cuda did not load; using CPU", { model: modelId, reason: failed });
        return "cpu";
      }
      logger.info("onnx device", { model: modelId, device: "cuda" });
      return "cuda";
    }
    logger.warn("onnx device: CUDA wanted but the onnxruntime CUDA provider is missing; using CPU", {
      model: modelId,
      missing: CUDA_PROVIDER_FILES.map((f) => join(facts.libDir ?? "<onnxruntime-node>/bin", f)),
    });
    return "cpu";
  }
  logger.info("onnx device", { model: modelId, device: "cpu", reason: "no NVIDIA device" });
  return "cpu";
}

let preloaded: string | null | undefined;

/**
 * The CUDA libraries `install.sh --cuda` put in the executable's lib/cuda, loaded into the
 * process's global scope once before the first CUDA session: onnxruntime's provider has no RUNPATH
 * (cuda-preload.ts). null when they loaded or none are installed there (the system's are used);
 * else the loader's messages.
 */
function preloadInstalledCuda(): string | null {
  if (preloaded === undefined) {
    const failed = preloadCudaLibs(cudaPreloadOrder(executableLibDir()));
    preloaded = failed.length ? failed.map((f) => `${f.path}: ${f.error}`).join("; ") : null;
  }
  return preloaded;
}

/**
 * A model that asked for a device this host does not have. Its load fails with this (503
 * model_unavailable on every request for it); the start goes on and other models keep serving.
 */
export class DeviceUnavailableError extends ApiError {
  constructor(message: string) {
    super("model_unavailable", message);
    this.name = "DeviceUnavailableError";
  }
}

/** An identity graph on one float (opset 17): the smallest model a WebGPU session can be made for. */
async function probeModel(): Promise<Uint8Array> {
  const { onnx } = await import("onnx-proto");
  const value = (name: string) => ({ name, type: { tensorType: { elemType: 1, shape: { dim: [{ dimValue: 1 }] } } } });
  return onnx.ModelProto.encode({
    irVersion: 8,
    opsetImport: [{ domain: "", version: 17 }],
    graph: { name: "webgpu-probe", node: [{ opType: "Identity", input: ["x"], output: ["y"] }], input: [value("x")], output: [value("y")] },
  }).finish();
}

let webGpu: Promise<string | null> | null = null;

/**
 * Whether onnxruntime-node's WebGPU provider finds an adapter: null when it does, else why not.
 * The cheapest real test it offers is a session with the webgpu provider (Dawn asks for an adapter
 * there; about 0.1–0.2 s). Asked once per process: adapters do not come and go while it runs.
 */
export function probeWebGpu(): Promise<string | null> {
  webGpu ??= (async () => {
    await import("./onnx-telemetry"); // before ONNX Runtime starts: no telemetry, no mat-debug log
    const ort = await import("onnxruntime-node");
    try {
      const session = await ort.InferenceSession.create(await probeModel(), { executionProviders: ["webgpu"], logSeverityLevel: 4 });
      await session.release();
      return null;
    } catch (e) {
      // ORT prefixes the source location and the failed check: keep Dawn's own words.
      const message = (e as Error).message;
      const at = message.indexOf("Failed to get a WebGPU adapter");
      return (at >= 0 ? message.slice(at) : message).trim();
    }
  })();
  return webGpu;
}

const refusedLogged = new WeakMap<Logger, Set<string>>();

/**
 * Throws DeviceUnavailableError when `device` is webgpu and no adapter is found; logged once per
 * model (every request for it tries the load again and gets the same refusal).
 */
export async function requireOnnxDevice(device: OnnxBackend, what: string, modelId: string, logger: Logger): Promise<void> {
  if (device !== "webgpu") return;
  const missing = await probeWebGpu();
  if (missing === null) return;
  const message = `${what} "${modelId}" cannot load: no WebGPU adapter found: ${missing}; set device = "cpu" or "cuda" in its manifest`;
  const logged = refusedLogged.get(logger) ?? new Set<string>();
  refusedLogged.set(logger, logged);
  if (!logged.has(modelId)) logger.error("onnx device: no WebGPU adapter", { model: modelId, error: message });
  logged.add(modelId);
  throw new DeviceUnavailableError(message);
}
