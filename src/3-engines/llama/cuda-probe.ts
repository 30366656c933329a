import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { getLlama } from "node-llama-cpp";
import { ensureChatModel } from "../../../models/cache";
import { COMPILED, CUDA12_BINS, CUDA_BUILD_ENV, CUDA_SOURCE_BINS, executableLibDir } from "../installed";

// node-llama-cpp's CUDA build can load and list the GPU, then abort the whole process at its
// first kernel: measured on an H100 with driver 580.159 ("CUDA error: the provided PTX was compiled
// with an unsupported toolchain", the prebuilt's kernels being newer than the driver). So before
// the server picks CUDA, a child process (the same program, `appliance internal cuda-probe`)
// offloads a tiny generated model and decodes a few tokens on it; only when that child exits 0 is
// CUDA used. Its output names the reason otherwise.

export const CUDA_PROBE_ARGS = ["internal", "cuda-probe"];

/** The command that runs this program again with `args` (the executable, or bun with the CLI). */
export function selfCommand(args: string[]): string[] {
  return COMPILED ? [process.execPath, ...args] : [process.execPath, join(import.meta.dir, "..", "..", "..", "cli", "main.ts"), ...args];
}

/**
 * The CUDA builds, in the order they are tried: the one built on this host from source for its own
 * GPUs (`./install.sh --cuda-build`, src/ops/build/cuda-source.ts: this driver's toolkit, this
 * card's SASS), then node-llama-cpp's CUDA 13 build (SASS for sm_86, 89, 120, 121; PTX for 75, 80,
 * 90, which the driver compiles only when it is as new as the toolkit that made it), then, from the
 * executable, the CUDA 12 build its -ext package carries (PTX 8.4 for sm_50…80, compiled by any
 * driver since R550; src/ops/build/executable.ts assembles it). Vulkan and the CPU come after them
 * (runtime.ts).
 */
export type CudaBuild = "source" | "13" | "12";

export function cudaBuilds(): CudaBuild[] {
  if (!COMPILED) return ["13"];
  const has = (bins: string) => existsSync(join(executableLibDir(), bins));
  return [...(has(CUDA_SOURCE_BINS) ? (["source"] as const) : []), "13", ...(has(CUDA12_BINS) ? (["12"] as const) : [])];
}

/** Makes node-llama-cpp's CUDA package offer `build` to the next getLlama in this process (and its children). */
export function selectCudaBuild(build: CudaBuild): void {
  if (build === "13") delete process.env[CUDA_BUILD_ENV];
  else process.env[CUDA_BUILD_ENV] = build;
}

/** How a build is named in logs and doctor. */
export function cudaBuildName(build: CudaBuild): string {
  return build === "source" ? "the CUDA build made on this host (./install.sh --cuda-build)" : `node-llama-cpp's CUDA ${build} build`;
}

export type CudaChoice = { build: CudaBuild; failed: string[] } | { build: null; failed: string[] };

/** The first CUDA build a child decodes on; `failed` says why each one before it was not used. */
export async function chooseCudaBuild(builds = cudaBuilds(), probe: (b: CudaBuild) => Promise<string | null> = probeCudaDecode): Promise<CudaChoice> {
  const failed: string[] = [];
  for (const build of builds) {
    const why = await probe(build);
    if (why === null) return { build, failed };
    failed.push(`${cudaBuildName(build)}: ${why}`);
  }
  return { build: null, failed };
}

/** null when CUDA decodes; else the reason (the child's CUDA error line, or how it ended). */
export async function probeCudaDecode(build: CudaBuild = "13", timeoutMs = 120_000, cmd = selfCommand(CUDA_PROBE_ARGS)): Promise<string | null> {
  const env: Record<string, string | undefined> = { ...process.env, [CUDA_BUILD_ENV]: build === "13" ? undefined : build };
  const child = Bun.spawn(cmd, { stdout: "pipe", stderr: "pipe", env });
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    child.kill("SIGKILL");
  }, timeoutMs);
  const [out, err, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  clearTimeout(timer);
  if (code === 0 && out.includes("cuda-probe: ok")) return null;
  const text = `${out}\n${err}`;
  const line = text.split("\n").find((l) => /CUDA error|cuda-probe: /.test(l))?.replace(/^.*?(CUDA error|cuda-probe: )/, "$1").trim();
  const ended = child.signalCode ? `killed by ${child.signalCode}` : `exit ${code}`;
  return `a CUDA decode test ${timedOut ? `timed out after ${timeoutMs} ms` : `failed (${ended})`}${line ? `: ${line}` : ""}`;
}

/** The child's side: load the CUDA build, offload a tiny model, decode; prints "cuda-probe: ok". */
export async function runCudaProbe(): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), "appliance-cuda-probe-"));
  try {
    const llama = await getLlama({ gpu: "cuda", build: "never", skipDownload: true, progressLogs: false, maxThreads: 1 });
    const model = await llama.loadModel({ modelPath: await ensureChatModel("small-chat", dir), gpuLayers: "max" });
    if (model.gpuLayers === 0) throw new Error("no layer was offloaded to CUDA");
    const context = await model.createContext({ contextSize: 256, batchSize: 64, sequences: 1 });
    const sequence = context.getSequence();
    let n = 0;
    for await (const _ of sequence.evaluate(model.tokenize("hello there"), { temperature: 0 })) if (++n >= 4) break;
    console.log("cuda-probe: ok");
    return 0;
  } catch (e) {
    console.log(`cuda-probe: ${(e as Error).message}`);
    return 1;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
