import { join } from "node:path";
import { cudaLibFolders, cudaLibsFixCommand } from "../build/cuda-libs";
import { executableLibDir } from "../../3-engines/installed";
import { CUDA_PROVIDER_FILES } from "../../3-engines/onnx-device";
import { formatBytes, ok, plural, warn, type Check, type Probes } from "./check";

// GPUs as nvidia-smi sees them, and the CUDA libraries the engines load: what is findable where.
// Gathering runs nvidia-smi and ldconfig and lists folders; everything else here is pure.

export interface GpuInfo {
  index: number;
  name: string;
  memory_mib: number;
  driver: string;
}

export interface GpuFacts {
  /** /dev/nvidiactl or /proc/driver/nvidia/version exists: the engines' "NVIDIA device present". */
  nvidiaDevice: boolean;
  smiFound: boolean;
  gpus: GpuInfo[];
  /** What went wrong asking nvidia-smi (with a hint for the well-known failures), or null. */
  problem: string | null;
}

export const GPU_QUERY = ["nvidia-smi", "--query-gpu=index,name,memory.total,driver_version", "--format=csv,noheader,nounits"];

const SMI_HINTS: [RegExp, string][] = [
  [/Driver\/library version mismatch/i, "the loaded kernel module and the driver libraries differ (a driver update without reboot): reboot, or reload the nvidia kernel module"],
  [/couldn't communicate with the NVIDIA driver/i, "the NVIDIA kernel module is not loaded: `sudo modprobe nvidia`, or reinstall the driver for this kernel"],
  [/No devices were found/i, "the driver sees no GPU (a VM without passthrough, or a GPU fallen off the bus: see `dmesg`)"],
  [/Insufficient Permissions/i, "this user may not open /dev/nvidia*: add it to the group owning them, or run as that user"],
];

/** `index, name, memory.total, driver_version` lines; a name may hold commas (nvidia-smi does not quote). */
export function parseGpuQuery(stdout: string): { gpus: GpuInfo[]; problem: string | null } {
  const lines = stdout.split(/\r?\n/).map((l) => l.trim()).filter(Boolean);
  const gpus: GpuInfo[] = [];
  const bad: string[] = [];
  for (const line of lines) {
    const parts = line.split(",").map((p) => p.trim());
    const [index, memory, driver] = [parts[0], parts.at(-2), parts.at(-1)];
    const name = parts.slice(1, -2).join(", ");
    if (parts.length >= 4 && /^\d+$/.test(index!) && /^\d+$/.test(memory!) && /^\d+(\.\d+)*$/.test(driver!) && name) {
      gpus.push({ index: Number(index), name, memory_mib: Number(memory), driver: driver! });
    } else {
      bad.push(line);
    }
  }
  if (!bad.length) return { gpus, problem: gpus.length ? null : "nvidia-smi listed no GPUs" };
  return { gpus, problem: withHint(gpus.length ? `unreadable line "${clip(bad[0]!)}"` : clip(bad[0]!)) };
}

export async function gatherGpus(probes: Pick<Probes, "run" | "nvidiaDevice">): Promise<GpuFacts> {
  const nvidiaDevice = probes.nvidiaDevice();
  let r: Awaited<ReturnType<Probes["run"]>>;
  try {
    r = await probes.run(GPU_QUERY);
  } catch (e) {
    if ((e as { code?: string }).code === "ENOENT") return { nvidiaDevice, smiFound: false, gpus: [], problem: "nvidia-smi not found" };
    return { nvidiaDevice, smiFound: true, gpus: [], problem: `nvidia-smi could not run: ${(e as Error).message}` };
  }
  if (r.code !== 0) {
    const line = firstLine(r.stdout) || firstLine(r.stderr) || "no output";
    return { nvidiaDevice, smiFound: true, gpus: [], problem: `nvidia-smi exited with ${r.code}: ${withHint(line)}` };
  }
  return { nvidiaDevice, smiFound: true, ...parseGpuQuery(r.stdout) };
}

/** No GPU at all is fine (CPU only); a GPU the driver cannot drive is a warning: the engines fall back to CPU. */
export function checkGpus(f: GpuFacts): Check {
  const name = "gpus";
  if (f.gpus.length) {
    const drivers = [...new Set(f.gpus.map((g) => g.driver))].join(", ");
    const list = f.gpus.map((g) => `#${g.index} ${g.name} (${formatBytes(g.memory_mib * 1024 * 1024)})`).join(", ");
    const detail = `${plural(f.gpus.length, "GPU")}, driver ${drivers}: ${list}`;
    return f.problem ? warn(name, `${detail}; ${f.problem}`, "run `nvidia-smi` to see the GPU it could not report") : ok(name, detail);
  }
  if (!f.smiFound) {
    if (!f.nvidiaDevice) return ok(name, "CPU only (no NVIDIA driver: nvidia-smi not found)");
    return warn(name, "an NVIDIA device is present but nvidia-smi is not found", "install the NVIDIA driver's utilities (same version as the kernel module)");
  }
  if (!f.nvidiaDevice && /No devices were found|listed no GPUs/i.test(f.problem ?? "")) return ok(name, `CPU only (${f.problem})`);
  return warn(name, `no usable GPU: ${f.problem}`, "the engines run on the CPU until `nvidia-smi` lists the GPUs");
}

// ---- CUDA runtime libraries ---------------------------------------------------------------------

/**
 * node-llama-cpp's CUDA build links libcudart.so.13 + libcublas.so.13 (its cuda-ext package's
 * fallback build: the .12 ones); onnxruntime 1.30's CUDA provider needs CUDA 12 and cuDNN 9.
 */
export const CUDA_LIBS = ["libcudart.so.13", "libcublas.so.13", "libcudart.so.12", "libcublas.so.12", "libcudnn.so.9"] as const;
export type CudaLib = (typeof CUDA_LIBS)[number];

export interface CudaFacts {
  /** Where each library was found ("ldconfig", a folder), or null. */
  libs: Record<CudaLib, string | null>;
  /** Folders of libggml-cuda.so in node-llama-cpp's CUDA prebuilt packages. */
  llamaCuda: { primary: string | null; fallback: string | null };
  /** libonnxruntime.so.1's folder and the CUDA provider files missing there. */
  onnx: { dir: string | null; missing: string[] };
}

/** `ldconfig -p` lines: "\tlibcudart.so.12 (libc6,x86-64) => /usr/local/cuda/lib64/libcudart.so.12". */
export function parseLdconfig(stdout: string): Map<string, string> {
  const found = new Map<string, string>();
  for (const line of stdout.split(/\r?\n/)) {
    const m = /^\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)/.exec(line);
    if (m && !found.has(m[1]!)) found.set(m[1]!, m[3]!);
  }
  return found;
}

/** Each library's first place: the linker cache, then the given folders (LD_LIBRARY_PATH, the CUDA prebuilts). */
export function findCudaLibs(ldconfig: Map<string, string>, folders: { dir: string; files: string[] }[]): Record<CudaLib, string | null> {
  const out = {} as Record<CudaLib, string | null>;
  for (const lib of CUDA_LIBS) {
    const cached = ldconfig.get(lib);
    const folder = folders.find((f) => f.files.includes(lib));
    out[lib] = cached ?? (folder ? join(folder.dir, lib) : null);
  }
  return out;
}

export async function gatherCuda(probes: Pick<Probes, "run" | "env" | "readdir" | "llamaCuda" | "onnxLibDir">): Promise<CudaFacts> {
  let ldconfig = new Map<string, string>();
  // ldconfig lives in /sbin, which is not on every user's PATH.
  for (const bin of ["ldconfig", "/sbin/ldconfig"]) {
    try {
      const r = await probes.run([bin, "-p"]);
      if (r.code === 0) {
        ldconfig = parseLdconfig(r.stdout);
        break;
      }
    } catch {}
  }
  const llamaCuda = probes.llamaCuda();
  const onnxDir = probes.onnxLibDir();
  // …and the executable's lib/cuda, where `install.sh --cuda` puts them
  const installed = cudaLibFolders(executableLibDir()).map((f) => f.dir);
  const dirs = [...(probes.env.LD_LIBRARY_PATH ?? "").split(":").filter(Boolean), llamaCuda.primary, llamaCuda.fallback, onnxDir, ...installed];
  const folders = [...new Set(dirs.filter((d): d is string => !!d))].map((dir) => ({ dir, files: probes.readdir(dir) }));
  const onnxFiles = onnxDir ? probes.readdir(onnxDir) : [];
  return {
    libs: findCudaLibs(ldconfig, folders),
    llamaCuda,
    onnx: { dir: onnxDir, missing: CUDA_PROVIDER_FILES.filter((f) => !onnxFiles.includes(f)) },
  };
}

/** The newest CUDA major version a Linux driver runs: 13.x from R580, 12.x from R525. */
export function driverCudaMajor(driver: string | undefined): number | null {
  const major = Number(/^(\d+)/.exec(driver ?? "")?.[1]);
  if (!major) return null;
  return major >= 580 ? 13 : major >= 525 ? 12 : 11;
}

export const has = (c: CudaFacts, ...libs: CudaLib[]) => libs.every((l) => c.libs[l] !== null);

/** Driver version and which CUDA runtime libraries are findable. Severity for the engines is theirs. */
export function checkCudaRuntime(g: GpuFacts, c: CudaFacts): Check {
  const name = "cuda runtime";
  const found = CUDA_LIBS.filter((l) => c.libs[l]).map((l) => `${l} (${c.libs[l]})`);
  const missing = CUDA_LIBS.filter((l) => !c.libs[l]);
  const libs = `found ${found.length ? found.join(", ") : "none"}${missing.length ? `; missing ${missing.join(", ")}` : ""}`;
  if (!g.gpus.length) return ok(name, `not needed (CPU only); ${libs}`);
  const driver = g.gpus[0]!.driver;
  const cuda = driverCudaMajor(driver);
  const detail = `driver ${driver} (runs CUDA ≤ ${cuda ?? "?"}.x); ${libs}`;
  const chat13 = has(c, "libcudart.so.13", "libcublas.so.13") && cuda !== null && cuda >= 13;
  const chat12 = has(c, "libcudart.so.12", "libcublas.so.12") && cuda !== null && cuda >= 12 && c.llamaCuda.fallback !== null;
  if (chat13 || chat12) return ok(name, detail);
  if (has(c, "libcudart.so.13", "libcublas.so.13") && cuda !== null && cuda < 13)
    return warn(name, detail, `node-llama-cpp's CUDA build needs CUDA 13, which needs driver ≥ 580: update the NVIDIA driver`);
  return warn(
    name,
    detail,
    `install the CUDA 13 runtime (libcudart.so.13, libcublas.so.13): ${cudaLibsFixCommand()}; or the cuda-libraries-13-0 package, or add its folder to LD_LIBRARY_PATH`,
  );
}

/**
 * llama.cpp's CUDA backend built on this host (`./install.sh --cuda-build`): which architectures
 * and toolkit, or whether one could be built here (nvcc present) for these GPUs.
 */
export function checkCudaSourceBuild(g: GpuFacts, built: ReturnType<Probes["cudaSourceBuild"]>, nvcc: ReturnType<Probes["nvcc"]>): Check {
  const name = "cuda source build";
  if (built) return ok(name, `built on this host for ${built.archs.map((a) => `sm_${a}`).join(", ")} with nvcc ${built.nvcc} (${built.built_at.slice(0, 10)}, ${built.dir}); the CUDA decode test tries it first`);
  if (!g.gpus.length) return ok(name, `none (not needed: no NVIDIA GPU)${nvcc ? `; nvcc ${nvcc.version} at ${nvcc.path}` : ""}`);
  if (!nvcc) return ok(name, "none; no nvcc here (a CUDA toolkit lets ./install.sh --cuda-build compile llama.cpp's CUDA backend for this GPU when no prebuilt one decodes)");
  return ok(name, `none; nvcc ${nvcc.version} at ${nvcc.path}: ./install.sh --cuda-build compiles llama.cpp's CUDA backend for this GPU (done by itself when no prebuilt CUDA build decodes here)`);
}

/** The hint for missing onnxruntime CUDA provider files: where they go, and from where. */
export function providerHint(dir: string | null): string {
  const where = dir ?? "node_modules/onnxruntime-node/bin/napi-v6/linux/x64";
  return `${cudaLibsFixCommand()} installs ${CUDA_PROVIDER_FILES.join(" and ")} (onnxruntime 1.30.0's CUDA 13 provider, with cuDNN 9) into ${where} (the manual: web/docs/gpu.md, Docs in the console)`;
}

function withHint(line: string): string {
  const hint = SMI_HINTS.find(([re]) => re.test(line));
  return hint ? `${line} (${hint[1]})` : line;
}

function firstLine(text: string): string {
  return clip(text.split(/\r?\n/).find((l) => l.trim())?.trim() ?? "");
}

function clip(s: string, max = 160): string {
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}
