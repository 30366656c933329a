import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync, copyFileSync, lstatSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { CUDA12_BINS, CUDA_SOURCE_BINS } from "../../3-engines/installed";
import { probeCudaDecode } from "../../3-engines/llama/cuda-probe";

// `./install.sh --cuda-build` (issue 49): llama.cpp's CUDA backend (libggml-cuda.so) compiled with
// this host's nvcc for this host's GPUs, from the llama.cpp source node-llama-cpp ships (its
// llama/gitRelease.bundle: the very source its prebuilt binaries were made from, so the library
// fits their libggml-base.so). What llama.cpp users do when a prebuilt does not fit their driver.
// The result is a build of its own under lib/ (CUDA_SOURCE_BINS): node-llama-cpp's CUDA prebuilt
// files with this libggml-cuda.so in place of its own, all links but the library; the decode probe
// (src/3-engines/llama/cuda-probe.ts) tries it first.
//
// cuBLAS: the toolkit's own (a full CUDA toolkit), or the one `./install.sh --cuda` fetched into
// lib/cuda (headers and libraries of NVIDIA's redistributable archive).

const HOST = `${process.platform}-${process.arch}`;
const PREBUILT = join("@node-llama-cpp", `${HOST}-cuda`, "bins", `${HOST}-cuda`);

export interface CudaToolchain {
  nvcc: string;
  /** "13.0" */
  version: string;
  /** The toolkit's root (nvcc's ../). */
  root: string;
}

/** "Cuda compilation tools, release 13.0, V13.0.88" → "13.0". */
export function nvccVersionOf(text: string): string | null {
  return /release (\d+\.\d+)/.exec(text)?.[1] ?? null;
}

/** Where nvcc is looked for besides --nvcc: the environment's CUDACXX, CUDA_HOME, CUDA_PATH and PATH, and the usual folder. */
export interface NvccSearch {
  env: Record<string, string | undefined>;
  usual: string[];
}
const HOST_SEARCH: NvccSearch = { env: process.env, usual: ["/usr/local/cuda/bin/nvcc"] };

/** nvcc: --nvcc, $CUDACXX, $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin, then PATH; null when none runs. */
export function findNvcc(given?: string, search: NvccSearch = HOST_SEARCH): CudaToolchain | null {
  const { env } = search;
  const onPath = env.PATH ? Bun.which("nvcc", { PATH: env.PATH }) : null;
  const candidates = [given, env.CUDACXX, env.CUDA_HOME && join(env.CUDA_HOME, "bin", "nvcc"), env.CUDA_PATH && join(env.CUDA_PATH, "bin", "nvcc"), ...search.usual, onPath];
  for (const c of candidates) {
    if (!c || !existsSync(c)) continue;
    const r = Bun.spawnSync([c, "--version"], { stdout: "pipe", stderr: "pipe" });
    const version = r.exitCode === 0 ? nvccVersionOf(r.stdout.toString()) : null;
    if (!version) continue;
    const real = resolve(dirname(Bun.which(c) ?? c));
    return { nvcc: c, version, root: resolve(real, "..") };
  }
  return null;
}

/** nvidia-smi --query-gpu=compute_cap's lines ("9.0", "8.6") → CMake's architectures ("90", "86"), once each. */
export function archsFromComputeCaps(text: string): string[] {
  const out = new Set<string>();
  for (const line of text.split("\n")) {
    const m = /^\s*(\d+)\.(\d+)\s*$/.exec(line);
    if (m) out.add(`${m[1]}${m[2]}`);
  }
  return [...out];
}

/** "90", "90,86", "sm_90", "9.0" → ["90", "86"]; null when a part is not an architecture. */
export function parseArchs(text: string): string[] | null {
  const out: string[] = [];
  for (const raw of text.split(/[,;\s]+/).filter(Boolean)) {
    const m = /^(?:sm_|compute_)?(\d)\.?(\d{1,2})(a|f)?$/.exec(raw.trim());
    if (!m) return null;
    const arch = `${m[1]}${m[2]}${m[3] ?? ""}`;
    if (!out.includes(arch)) out.push(arch);
  }
  return out.length ? out : null;
}

/** This host's GPUs' architectures, from nvidia-smi; [] without one. */
export function hostArchs(): string[] {
  if (!Bun.which("nvidia-smi")) return [];
  const r = Bun.spawnSync(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"], { stdout: "pipe", stderr: "pipe" });
  return r.exitCode === 0 ? archsFromComputeCaps(r.stdout.toString()) : [];
}

export interface Cublas {
  include: string;
  /** The library file to link (libcublas.so or libcublas.so.13). */
  library: string;
}

/** cuBLAS's header and library: in the toolkit, in `extra` folders (lib/cuda of `./install.sh --cuda`), or none. */
export function findCublas(toolkit: CudaToolchain, extra: string[] = []): Cublas | null {
  const roots = [toolkit.root, join(toolkit.root, "targets", `${process.arch === "arm64" ? "sbsa" : "x86_64"}-linux`), ...extra];
  for (const root of roots) {
    const include = join(root, "include");
    if (!existsSync(join(include, "cublas_v2.h"))) continue;
    for (const libDir of [join(root, "lib64"), join(root, "lib"), root]) {
      const lib = existsSync(libDir) ? readdirSync(libDir).filter((f) => /^libcublas\.so(\.\d+)*$/.test(f)).sort((a, b) => a.length - b.length)[0] : undefined;
      if (lib) return { include, library: join(libDir, lib) };
    }
  }
  return null;
}

/** The NVIDIA driver's libcuda.so.1 (or a toolkit stub) for linking; null when none is found. */
export function findCudaDriver(toolkit: CudaToolchain): string | null {
  const ld = Bun.spawnSync(["ldconfig", "-p"], { stdout: "pipe", stderr: "pipe" });
  const fromCache = ld.exitCode === 0 ? /\slibcuda\.so\.1 \(libc6,x86-64\) => (\S+)/.exec(ld.stdout.toString())?.[1] : undefined;
  const stubs = [join(toolkit.root, "lib64", "stubs", "libcuda.so"), join(toolkit.root, "targets", "x86_64-linux", "lib", "stubs", "libcuda.so")];
  return [fromCache, ...stubs].find((p): p is string => Boolean(p && existsSync(p))) ?? null;
}

/** "[12/140] Building CUDA object …" (ninja's progress) → {done, total}. */
export function ninjaProgress(line: string): { done: number; total: number } | null {
  const m = /^\[(\d+)\/(\d+)\]/.exec(line);
  return m ? { done: Number(m[1]), total: Number(m[2]) } : null;
}

export interface SourceBuildOptions {
  /** The installed lib/ folder (the executable's), or the checkout's node_modules (a test). */
  lib: string;
  /** The folder the prebuilt CUDA build is in, relative to `lib` (default: node-llama-cpp's package layout). */
  prebuilt?: string;
  archs: string[];
  toolkit: CudaToolchain;
  cublas: Cublas;
  /** libcuda.so for linking (findCudaDriver). */
  driver: string;
  /** node-llama-cpp's llama/ folder (its gitRelease.bundle and llama.cpp.info.json). */
  llamaDir: string;
  /** A llama.cpp source tree of that release to build from instead of unpacking the bundle (a machine with no git, or a packed copy). */
  source?: string;
  /** Source checkout and build tree (kept for ccache and a later rebuild). */
  workDir?: string;
  jobs?: number;
  /** Extra CMake -D options (a test's compile-only check). */
  cmakeExtra?: string[];
  log?: (line: string) => void;
}

export interface SourceBuild {
  dir: string;
  library: string;
  archs: string[];
  nvcc: string;
  llamaCpp: string;
  seconds: number;
}

/** The source folder a CMake build tree was configured from (its CMakeCache.txt), null where there is none. */
export function builtFrom(build: string): string | null {
  const cache = join(build, "CMakeCache.txt");
  if (!existsSync(cache)) return null;
  const m = /^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$/m.exec(readFileSync(cache, "utf8"));
  return m ? resolve(m[1]!) : null;
}

/** The default work folder: the user's cache, one per llama.cpp release. */
export function defaultWorkDir(tag: string): string {
  return join(process.env.XDG_CACHE_HOME ?? join(homedir(), ".cache"), "appliance", "cuda-build", tag);
}

function run(cmd: string[], cwd: string | undefined, what: string): void {
  const r = Bun.spawnSync(cmd, { cwd, stdout: "pipe", stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`${what} failed (${cmd.join(" ")}):\n${(r.stderr.toString() || r.stdout.toString()).trim().split("\n").slice(-20).join("\n")}`);
}

/** The CMake configure line for libggml-cuda.so as node-llama-cpp's prebuilt is made (dynamic backends, unversioned sonames, RUNPATH $ORIGIN only). */
export function cmakeConfigure(o: { src: string; build: string; archs: string[]; toolkit: CudaToolchain; cublas: Cublas; driver: string; ccache: boolean; extra?: string[] }): string[] {
  const inc = `-I${o.cublas.include}`;
  return [
    "cmake", "-S", o.src, "-B", o.build, "-G", "Ninja",
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=ON", "-DGGML_BACKEND_DL=ON", "-DGGML_CUDA=ON", "-DGGML_NATIVE=OFF", "-DGGML_CPU=OFF",
    "-DGGML_CUDA_NCCL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_TOOLS=OFF", "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_CURL=OFF",
    `-DCMAKE_CUDA_COMPILER=${o.toolkit.nvcc}`,
    `-DCMAKE_CUDA_ARCHITECTURES=${o.archs.join(";")}`,
    `-DCUDAToolkit_ROOT=${o.toolkit.root}`,
    `-DCUDA_cublas_LIBRARY=${o.cublas.library}`,
    `-DCUDA_cuda_driver_LIBRARY=${o.driver}`,
    `-DCMAKE_CUDA_FLAGS=${inc}`,
    `-DCMAKE_CXX_FLAGS=${inc}`,
    "-DCMAKE_PLATFORM_NO_VERSIONED_SONAME=ON",
    // RUNPATH $ORIGIN alone, as the prebuilt's: the libraries beside it, never this host's build folders.
    "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
    "-DCMAKE_INSTALL_RPATH=$ORIGIN",
    `-DGGML_CCACHE=${o.ccache ? "ON" : "OFF"}`,
    ...(o.extra ?? []),
  ];
}

/**
 * Builds libggml-cuda.so and installs it as a build of its own under `lib` (CUDA_SOURCE_BINS):
 * the prebuilt CUDA build's files, linked, with this library in place of its own.
 */
export async function buildCudaFromSource(o: SourceBuildOptions): Promise<SourceBuild> {
  const log = o.log ?? ((l: string) => console.log(l));
  const started = performance.now();
  const info = JSON.parse(readFileSync(join(o.llamaDir, "llama.cpp.info.json"), "utf8")) as { tag: string };
  const prebuilt = join(o.lib, o.prebuilt ?? PREBUILT);
  if (!existsSync(join(prebuilt, "libggml-base.so"))) throw new Error(`node-llama-cpp's CUDA build is not installed (${prebuilt}); the source build replaces its libggml-cuda.so`);
  if (!Bun.which("cmake") || !Bun.which("ninja")) throw new Error("the CUDA source build needs cmake and ninja (apt install cmake ninja-build)");

  const work = o.workDir ?? defaultWorkDir(info.tag);
  const src = o.source ? resolve(o.source) : join(work, "llama.cpp");
  const build = join(work, `build-${o.archs.join("-")}`);
  mkdirSync(work, { recursive: true });
  if (o.source && !existsSync(join(src, "ggml", "src", "ggml-cuda", "CMakeLists.txt"))) throw new Error(`${src} is not a llama.cpp source tree with ggml's CUDA backend`);
  // CMake refuses a build tree configured from another source folder: a tree of the other one is started afresh
  const configuredFrom = builtFrom(build);
  if (configuredFrom !== null && configuredFrom !== src) rmSync(build, { recursive: true, force: true });
  if (!existsSync(join(src, "CMakeLists.txt"))) {
    const bundle = join(o.llamaDir, "gitRelease.bundle");
    if (!existsSync(bundle)) throw new Error(`node-llama-cpp's llama.cpp source is missing (${bundle})`);
    if (!Bun.which("git")) throw new Error("the CUDA source build needs git, to unpack node-llama-cpp's llama.cpp source");
    log(`cuda-build: unpacking llama.cpp ${info.tag} (node-llama-cpp's source) into ${src}`);
    rmSync(src, { recursive: true, force: true });
    run(["git", "clone", "--quiet", bundle, src], undefined, "unpacking llama.cpp's source");
  }
  const ccache = Boolean(Bun.which("ccache"));
  log(`cuda-build: nvcc ${o.toolkit.version} (${o.toolkit.nvcc}), architectures ${o.archs.map((a) => `sm_${a}`).join(", ")}, cuBLAS ${o.cublas.library}${ccache ? ", ccache" : ""}`);
  run(cmakeConfigure({ src, build, archs: o.archs, toolkit: o.toolkit, cublas: o.cublas, driver: o.driver, ccache, extra: o.cmakeExtra }), undefined, "configuring the CUDA build (cmake)");

  const jobs = o.jobs ?? Math.max(1, navigator.hardwareConcurrency);
  log(`cuda-build: compiling ggml's CUDA kernels with ${jobs} jobs (minutes; progress below)`);
  const child = Bun.spawn(["cmake", "--build", build, "--target", "ggml-cuda", "-j", String(jobs)], { stdout: "pipe", stderr: "pipe" });
  const tail: string[] = [];
  let lastShown = 0;
  const reader = (async () => {
    const decoder = new TextDecoder();
    let buf = "";
    for await (const chunk of child.stdout as ReadableStream<Uint8Array>) {
      buf += decoder.decode(chunk, { stream: true });
      let i: number;
      while ((i = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        tail.push(line);
        if (tail.length > 40) tail.shift();
        const p = ninjaProgress(line);
        const now = performance.now();
        if (p && (now - lastShown > 15_000 || p.done === p.total)) {
          lastShown = now;
          const s = (now - started) / 1000;
          const left = p.done > 0 && p.done < p.total ? ` · about ${Math.round(((p.total - p.done) * s) / p.done / 60)} min left` : "";
          log(`cuda-build: ${p.done}/${p.total} (${Math.round((100 * p.done) / p.total)}%) · ${Math.round(s / 60)} min${left}`);
        }
      }
    }
  })();
  const [code, err] = await Promise.all([child.exited, new Response(child.stderr).text(), reader]);
  if (code !== 0) throw new Error(`compiling the CUDA backend failed (exit ${code}):\n${[...tail, err].join("\n").trim().split("\n").slice(-30).join("\n")}`);

  const library = join(build, "bin", "libggml-cuda.so");
  if (!existsSync(library)) throw new Error(`the build finished without ${library}`);
  const dir = installSourceBuild(o.lib, prebuilt, library);
  const seconds = Math.round((performance.now() - started) / 1000);
  const made: SourceBuild = { dir, library: join(dir, "libggml-cuda.so"), archs: o.archs, nvcc: o.toolkit.version, llamaCpp: info.tag, seconds };
  writeFileSync(join(dir, "appliance-cuda-build.json"), JSON.stringify({ ...made, built_at: new Date().toISOString() }, null, 2) + "\n");
  log(`cuda-build: done in ${Math.round(seconds / 60)} min: ${made.library}`);
  return made;
}

/** lib/CUDA_SOURCE_BINS/<host>-cuda: links to the prebuilt's files, this libggml-cuda.so copied in. */
export function installSourceBuild(lib: string, prebuilt: string, library: string): string {
  const dir = join(lib, CUDA_SOURCE_BINS, `${HOST}-cuda`);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  for (const f of readdirSync(prebuilt)) {
    if (f === "libggml-cuda.so") continue;
    symlinkSync(relative(dir, join(prebuilt, f)), join(dir, f));
  }
  copyFileSync(library, join(dir, "libggml-cuda.so"));
  // The CUDA libraries linked beside the prebuilt (./install.sh --cuda) are found the same way: through their links.
  if (!lstatSync(join(dir, "libggml-base.so")).isSymbolicLink()) throw new Error("installSourceBuild: libggml-base.so is not a link");
  return dir;
}

/** What the build needs, found on this host, or the first thing missing (with how to get it). */
export function sourceBuildInputs(o: { lib: string; archs?: string; nvcc?: string; search?: NvccSearch }):
  | { ok: true; toolkit: CudaToolchain; archs: string[]; cublas: Cublas; driver: string }
  | { ok: false; missing: string } {
  const toolkit = findNvcc(o.nvcc, o.search);
  if (!toolkit) return { ok: false, missing: "nvcc (NVIDIA's CUDA toolkit) was not found: install it, or name it with --nvcc PATH or CUDACXX" };
  const archs = o.archs ? parseArchs(o.archs) : hostArchs();
  if (!archs) return { ok: false, missing: `--cuda-arch ${o.archs}: not a GPU architecture (e.g. 90 for H100/H200, 89 for L4/RTX 4090, 86 for RTX 3090/A10)` };
  if (!archs.length) return { ok: false, missing: "nvidia-smi reports no GPU here: name the architecture with --cuda-arch (e.g. 90 for H100/H200)" };
  const cublas = findCublas(toolkit, [join(o.lib, "cuda")]);
  if (!cublas) return { ok: false, missing: `cuBLAS (cublas_v2.h and libcublas.so) is not in the CUDA toolkit at ${toolkit.root}: ./install.sh --cuda fetches NVIDIA's cuBLAS (headers included) first, or install the toolkit's cuBLAS` };
  const driver = findCudaDriver(toolkit);
  if (!driver) return { ok: false, missing: "libcuda.so.1 (the NVIDIA driver) was not found to link against" };
  return { ok: true, toolkit, archs, cublas, driver };
}

export type PrebuiltCuda = "13" | "12";

export interface AutoDecision {
  build: boolean;
  why: string;
}

/**
 * install.sh's rule for building CUDA by itself (no --cuda-build): an NVIDIA GPU is seen, nvcc is
 * here (on the PATH or where findNvcc looks: /usr/local/cuda-13.0 is not always on the PATH), and
 * no prebuilt CUDA build passes the decode probe, in the runtime's order.
 */
export async function autoBuildDecision(o: { gpus: string[]; toolkit: CudaToolchain | null; prebuilt: PrebuiltCuda[]; decodes: (b: PrebuiltCuda) => Promise<string | null> }): Promise<AutoDecision> {
  if (!o.gpus.length) return { build: false, why: "nvidia-smi lists no GPU here" };
  if (!o.toolkit) return { build: false, why: "no nvcc here (NVIDIA's CUDA toolkit): the prebuilt CUDA builds are used where they decode" };
  const failed: string[] = [];
  for (const b of o.prebuilt) {
    const why = await o.decodes(b);
    if (why === null) return { build: false, why: `node-llama-cpp's CUDA ${b} build decodes on this GPU` };
    failed.push(`CUDA ${b}: ${why}`);
  }
  return { build: true, why: `no prebuilt CUDA build decodes on this GPU (${failed.join("; ") || "none is installed"}); nvcc ${o.toolkit.version} is here` };
}

if (import.meta.main) {
  const args = process.argv.slice(2);
  const opt = (name: string) => {
    const at = args.indexOf(name);
    return at >= 0 ? args[at + 1] : undefined;
  };
  const lib = opt("--lib");
  if (!lib) {
    console.error("usage: bun src/ops/build/cuda-source.ts --lib DIR [--cuda-arch 90[,89]] [--nvcc PATH] [--jobs N] [--source LLAMA_CPP_DIR] [--auto APPLIANCE [--check]]");
    process.exit(2);
  }
  // --auto APPLIANCE: build only where install.sh's rule says so, probing the prebuilt builds with
  // that executable (`APPLIANCE internal cuda-probe`); --check says what it would do and builds nothing.
  const auto = opt("--auto");
  if (auto) {
    const toolkit = findNvcc(opt("--nvcc"));
    const prebuilt: PrebuiltCuda[] = ["13", ...(existsSync(join(lib, CUDA12_BINS)) ? (["12"] as const) : [])];
    const decision = await autoBuildDecision({ gpus: hostArchs(), toolkit, prebuilt, decodes: (b) => probeCudaDecode(b, 120_000, [resolve(auto), "internal", "cuda-probe"]) });
    console.log(`cuda-build: ${decision.build ? "building" : "not building"}: ${decision.why}`);
    if (!decision.build || args.includes("--check")) process.exit(0);
  }
  const inputs = sourceBuildInputs({ lib, archs: opt("--cuda-arch"), nvcc: opt("--nvcc") });
  if (!inputs.ok) {
    console.error(`cuda-build: cannot build: ${inputs.missing}`);
    process.exit(1);
  }
  try {
    const jobs = opt("--jobs") ? Number(opt("--jobs")) : undefined;
    await buildCudaFromSource({ lib, ...inputs, llamaDir: join(import.meta.dir, "..", "..", "..", "node_modules", "node-llama-cpp", "llama"), source: opt("--source"), jobs });
  } catch (e) {
    console.error(`cuda-build: ${(e as Error).message}`);
    process.exit(1);
  }
}
