import { cudaBuildName } from "../../3-engines/llama/cuda-probe";
import type { Config } from "../../lib/config";
import type { CudaChoice } from "../../3-engines/llama/cuda-probe";
import type { Device } from "../../3-engines/llama/runtime";
import type { ModelKind } from "../../lib/manifest";
import { THREADPOOL_POLL } from "../../3-engines/llama/threadpool";
import { fail, ok, plural, warn, type Check, type Probes } from "./check";
import { cudaLibsFixCommand } from "../build/cuda-libs";
import { driverCudaMajor, has, providerHint, type CudaFacts, type GpuFacts } from "./gpu";
import { vulkanUsable, type VulkanFacts } from "./vulkan";

// Which backend each engine will use and why, worked out the way the engines decide at load time
// (llama/runtime.ts, onnx-device.ts) but without loading anything: a prediction, with the reason.

/** A model as far as these checks care; the demo models count as one per kind. */
export interface Served {
  id: string;
  kind: ModelKind;
  /** The manifest's device ("vulkan" is the chat engine's, "webgpu" ONNX Runtime's). */
  device?: Device | "webgpu";
  vision?: boolean;
  /** A chat model's prompt batch (batch_size), when set. */
  batchSize?: number;
}

/** node-llama-cpp's prompt batch when a model sets no batch_size (its getDefaultContextBatchSize). */
const DEFAULT_CHAT_BATCH = 512;

export interface Decision {
  device: "cpu" | "cuda" | "vulkan" | "webgpu";
  reason: string;
  /** Set when a GPU backend was wanted but will not be used: which, why not, and what to do. */
  unmet?: { wanted?: "CUDA" | "Vulkan" | "WebGPU"; why: string; hint: string };
}

const ONNX_KINDS: ModelKind[] = ["embedding", "classifier", "reranker", "image"];

const cpu = (reason: string): Decision => ({ device: "cpu", reason });
const unmet = (reason: string, why: string, hint: string): Decision => ({ device: "cpu", reason, unmet: { why, hint } });
const noGpu = (g: GpuFacts) => ({ why: `no usable GPU (${g.problem ?? "nvidia-smi lists none"})`, hint: "see the gpus line: the driver must list the GPU first" });

/**
 * runtime.ts: CUDA when configured, or on "auto" with an NVIDIA device, and node-llama-cpp's CUDA
 * build loads; else (on "auto", or "vulkan" configured) Vulkan where its build would find a device;
 * else the CPU. Without Vulkan facts, Vulkan is not considered.
 */
export function chatBackend(device: Device, g: GpuFacts, c: CudaFacts, v?: VulkanFacts, decode?: CudaChoice): Decision {
  if (device === "cpu") return cpu('engines.device = "cpu"');
  if (device === "vulkan") {
    const u = v ? vulkanUsable(v) : { ok: false as const, why: "not probed", hint: "run `appliance doctor`" };
    return u.ok ? { device: "vulkan", reason: `engines.device = "vulkan"; ${u.how}` } : { device: "cpu", reason: 'engines.device = "vulkan"', unmet: { wanted: "Vulkan", why: u.why, hint: u.hint } };
  }
  const viaCuda = cudaBackend(device, g, c, decode);
  if (viaCuda.device === "cuda" || device === "cuda" || !v) return viaCuda;
  // "auto" without a usable CUDA: Vulkan where a GPU is there for it.
  const u = vulkanUsable(v);
  const cudaPart = viaCuda.unmet ? `CUDA not usable (${viaCuda.unmet.why})` : viaCuda.reason;
  if (u.ok) return { device: "vulkan", reason: `${cudaPart}; ${u.how}` };
  return viaCuda.unmet ? viaCuda : cpu(`${cudaPart}; Vulkan not usable: ${u.why}`);
}

/**
 * From the files: whether a CUDA build would load. Then, where the decode test ran (`decode`), what
 * it found: the build that decoded, or why none did (a build that loads may still abort at its
 * first kernel).
 */
function cudaBackend(device: "auto" | "cuda", g: GpuFacts, c: CudaFacts, decode?: CudaChoice): Decision {
  const d = cudaFromFiles(device, g, c);
  if (d.device !== "cuda" || !decode) return d;
  const wanted = device === "cuda" ? 'engines.device = "cuda"' : "NVIDIA device present";
  if (decode.build === null) {
    return unmet(
      wanted,
      `no CUDA build decoded in a test (${decode.failed.join("; ")})`,
      `build the CUDA backend for this GPU with this host's toolkit (./install.sh --cuda-build, needs nvcc and cuBLAS), or update the NVIDIA driver (a CUDA build's kernels need a driver as new as the toolkit that built them); the executable also tries node-llama-cpp's CUDA 12 build, whose runtime ${cudaLibsFixCommand()} fetches; or set engines.device = "vulkan"`,
    );
  }
  const before = decode.failed.length ? ` (${decode.failed.join("; ")})` : "";
  return { device: "cuda", reason: `${wanted}; ${cudaBuildName(decode.build)} decoded in a test${before}` };
}

function cudaFromFiles(device: "auto" | "cuda", g: GpuFacts, c: CudaFacts): Decision {
  if (device === "auto" && !g.nvidiaDevice) return cpu("no NVIDIA device");
  const wanted = device === "cuda" ? 'engines.device = "cuda"' : "NVIDIA device present";
  if (!c.llamaCuda.primary && !c.llamaCuda.fallback) {
    return unmet(wanted, "node-llama-cpp's CUDA prebuilt package is not installed", `reinstall with optional dependencies (\`bun install\`): node-llama-cpp ships its CUDA build as @node-llama-cpp/${process.platform}-${process.arch}-cuda`);
  }
  if (!g.gpus.length) {
    const n = noGpu(g);
    return unmet(wanted, n.why, n.hint);
  }
  const cuda = driverCudaMajor(g.gpus[0]!.driver) ?? 0;
  if (c.llamaCuda.primary && cuda >= 13 && has(c, "libcudart.so.13", "libcublas.so.13")) return { device: "cuda", reason: `${wanted}; CUDA 13 build, its runtime found` };
  if (c.llamaCuda.fallback && cuda >= 12 && has(c, "libcudart.so.12", "libcublas.so.12")) return { device: "cuda", reason: `${wanted}; CUDA 12 fallback build, its runtime found` };
  if (cuda < 13 && has(c, "libcudart.so.13", "libcublas.so.13")) {
    return unmet(wanted, `driver ${g.gpus[0]!.driver} runs CUDA ≤ ${cuda}.x, the CUDA build needs 13`, "update the NVIDIA driver to R580 or newer");
  }
  return unmet(wanted, "libcudart.so.13 / libcublas.so.13 not found", `${cudaLibsFixCommand()}, or install the CUDA 13 runtime (libcudart, libcublas) or add its folder to LD_LIBRARY_PATH`);
}

const WEBGPU_HINT =
  'install the GPU\'s Vulkan driver and loader (libvulkan1; for NVIDIA also libglvnd\'s GLX/EGL: libglx0 libegl1 libglvnd0), or set device = "cpu" or "cuda" in the model\'s manifest';

/**
 * onnx-device.ts: CUDA when configured, or on "auto" with an NVIDIA device, and the provider files
 * are there; WebGPU only when a model asks for it (`webgpu`: onnx-device.ts's probe, null when an
 * adapter was found); "vulkan" (the chat engine's backend) as "auto".
 */
export function onnxBackend(device: Device | "webgpu", g: GpuFacts, c: CudaFacts, webgpu?: string | null): Decision {
  if (device === "webgpu") {
    if (webgpu === null) return { device: "webgpu", reason: 'device = "webgpu"; adapter found' };
    return { device: "cpu", reason: 'device = "webgpu"', unmet: { wanted: "WebGPU", why: `no WebGPU adapter found: ${webgpu ?? "not probed"}`, hint: WEBGPU_HINT } };
  }
  if (device === "vulkan") {
    const d = onnxBackend("auto", g, c);
    return { ...d, reason: `engines.device = "vulkan" (the chat engine's backend): as auto; ${d.reason}` };
  }
  if (device === "cpu") return cpu('device = "cpu"');
  if (device === "auto" && !g.nvidiaDevice) return cpu("no NVIDIA device");
  const wanted = device === "cuda" ? 'device = "cuda"' : "NVIDIA device present";
  if (c.onnx.missing.length) {
    return unmet(wanted, `onnxruntime's CUDA provider is missing (${c.onnx.missing.join(", ")})`, providerHint(c.onnx.dir));
  }
  // From here resolveOnnxDevice says "cuda"; a session that cannot start on it falls back to CPU at load.
  if (!g.gpus.length) {
    const n = noGpu(g);
    return unmet(wanted, n.why, n.hint);
  }
  // The provider is a CUDA 13 build (install.sh --cuda) or a CUDA 12 one (copied by hand from
  // NuGet); either way it needs its CUDA runtime and cuDNN 9.
  const majors = ([13, 12] as const).filter((m) => has(c, `libcudart.so.${m}`, `libcublas.so.${m}`, "libcudnn.so.9"));
  if (!majors.length) {
    const lacking = (["libcudart.so.13", "libcublas.so.13", "libcudart.so.12", "libcublas.so.12", "libcudnn.so.9"] as const).filter((l) => !c.libs[l]);
    return unmet(wanted, `the provider's CUDA runtime and cuDNN 9 are missing (${lacking.join(", ")})`, cudaLibsFixCommand());
  }
  return { device: "cuda", reason: `${wanted}; provider files, ${majors.map((m) => `CUDA ${m}`).join(", ")} and cuDNN 9 found` };
}

const describe = (d: Decision) => (d.unmet ? `${d.unmet.wanted === "WebGPU" ? "not loaded" : "cpu"} (${d.unmet.wanted ?? "CUDA"} wanted: ${d.reason}; not usable: ${d.unmet.why})` : `${d.device} (${d.reason})`);

export function checkChatEngine(config: { engines: Pick<Config["engines"], "device"> & Partial<Config["engines"]> }, served: Served[], g: GpuFacts, c: CudaFacts, v?: VulkanFacts, decode?: CudaChoice): Check {
  const name = "chat engine";
  const d = chatBackend(config.engines.device, g, c, v, decode);
  const used = served.filter((m) => m.kind === "chat").length;
  const detail = `llama.cpp → ${describe(d)}; ${used ? plural(used, "chat model") : "no chat model configured"}`;
  if (!d.unmet) return ok(name, detail);
  // Asked for a GPU backend outright and will not get it: the models would run, slowly, on the CPU.
  return (config.engines.device === "cuda" || config.engines.device === "vulkan") && used ? fail(name, detail, d.unmet.hint) : warn(name, detail, d.unmet.hint);
}

export function checkOnnxEngines(config: Pick<Config, "engines">, served: Served[], g: GpuFacts, c: CudaFacts, webgpu?: string | null): Check {
  const name = "onnx engines";
  const models = served.filter((m) => ONNX_KINDS.includes(m.kind));
  if (!models.length) {
    const d = onnxBackend(config.engines.device, g, c);
    const detail = `onnxruntime → ${describe(d)}; no embedding, classifier, reranker or image model configured`;
    return d.unmet ? warn(name, detail, d.unmet.hint) : ok(name, detail);
  }
  const groups = new Map<Device | "webgpu", Served[]>();
  for (const m of models) {
    const device = m.device ?? config.engines.device;
    groups.set(device, [...(groups.get(device) ?? []), m]);
  }
  const decided = [...groups].map(([device, ms]) => ({ device, ms, d: onnxBackend(device, g, c, webgpu) }));
  const detail = "onnxruntime → " + decided.map(({ ms, d }) => `${describe(d)}: ${ms.map((m) => m.id).join(", ")}`).join("; ");
  const firstUnmet = decided.find((x) => x.d.unmet);
  if (!firstUnmet) return ok(name, detail);
  // Asked for outright and will not load (WebGPU) or will run on the CPU (CUDA).
  const forced = decided.some((x) => x.d.unmet && (x.device === "cuda" || x.device === "webgpu"));
  return (forced ? fail : warn)(name, detail, firstUnmet.d.unmet!.hint);
}

/** The llama addon's image input: warn when not built, fail when a configured model needs it. */
export function checkImageInput(addon: ReturnType<Probes["addon"]>, served: Served[]): Check {
  const name = "image input";
  const vision = served.filter((m) => m.vision).map((m) => m.id);
  const needs = vision.length ? `; needed by ${vision.join(", ")}` : "; no vision model configured";
  if (addon.path) return ok(name, `llama addon built (${addon.path})${needs}`);
  const why = addon.error ? `llama addon not found (${addon.error})` : "llama addon not built";
  const hint = "./install.sh builds it (cmake, a C++17 compiler, git; a few minutes)";
  if (vision.length) return fail(name, `${why}, but ${vision.join(", ")} take${vision.length === 1 ? "s" : ""} image input`, hint);
  return warn(name, `${why}: image input is unavailable${needs}`, hint);
}

/**
 * How chat models decode: on the llama addon's decode loop (a native thread per context that
 * batches, decodes and samples every request, grammars included) with a persistent CPU threadpool.
 * Without the addon no chat model loads.
 */
export function checkChatDecoding(addon: ReturnType<Probes["addon"]>, served: Served[]): Check {
  const name = "chat decoding";
  const chat = served.filter((m) => m.kind === "chat");
  const batches = [...new Set(chat.map((m) => m.batchSize ?? DEFAULT_CHAT_BATCH))].join("/");
  const steps = `steps of all generating slots together, flash attention where the device has it (llama.cpp's "auto")${chat.length ? `; prompt batches of ${batches} tokens (models' batch_size)` : ""}`;
  if (addon.path) return ok(name, `native decode loop and persistent CPU threadpool (idle workers poll at ${THREADPOOL_POLL} before sleeping; llama addon); ${steps}`);
  const detail = `no decode loop: the llama addon is ${addon.error ? `not found (${addon.error})` : "not built"}`;
  const hint = "./install.sh builds it (cmake, a C++17 compiler, git; a few minutes): chat models decode through it and do not load without it";
  return chat.length ? fail(name, `${detail}, and ${chat.map((m) => m.id).join(", ")} ${chat.length === 1 ? "is a chat model" : "are chat models"}`, hint) : ok(name, `${detail}; no chat model configured`);
}

/** engines.threads (0 = one per core) against the cores this machine has. */
export function checkThreads(config: Pick<Config, "engines" | "models">, cores: number): Check {
  const name = "threads";
  const set = config.engines.threads;
  const perModel = set || cores;
  const overrides = config.models.filter((m) => m.threads !== undefined).map((m) => `${m.id} ${m.threads}`);
  const detail =
    `${perModel} per model (${set ? `engines.threads = ${set}` : "engines.threads = 0: one per core"}); ${plural(cores, "core")}` +
    (overrides.length ? `; set per model: ${overrides.join(", ")}` : "");
  const over = [set, ...config.models.map((m) => m.threads ?? 0)].some((t) => t > cores);
  if (over) return warn(name, detail, `more threads than cores makes every model slower: set engines.threads (and models' threads) to at most ${cores}`);
  return ok(name, detail);
}
