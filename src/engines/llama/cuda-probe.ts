import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { getLlama } from "node-llama-cpp";
import { ensureChatModel } from "../../../models/cache";

// node-llama-cpp's CUDA build can load and list the GPU, then abort the whole process at its
// first kernel: measured on an H100 with driver 580.159 ("CUDA error: the provided PTX was compiled
// with an unsupported toolchain", the prebuilt's kernels being newer than the driver). So before
// the server picks CUDA, a child process (the same program, `appliance internal cuda-probe`)
// offloads a tiny generated model and decodes a few tokens on it; only when that child exits 0 is
// CUDA used. Its output names the reason otherwise.

export const CUDA_PROBE_ARGS = ["internal", "cuda-probe"];

/** The command that runs this program again with `args` (the executable, or bun with the CLI). */
export function selfCommand(args: string[]): string[] {
  return process.env.APPLIANCE_COMPILED === "1" ? [process.execPath, ...args] : [process.execPath, join(import.meta.dir, "..", "..", "..", "cli", "main.ts"), ...args];
}

/** null when CUDA decodes; else the reason (the child's CUDA error line, or how it ended). */
export async function probeCudaDecode(timeoutMs = 120_000, cmd = selfCommand(CUDA_PROBE_ARGS)): Promise<string | null> {
  const child = Bun.spawn(cmd, { stdout: "pipe", stderr: "pipe", env: process.env });
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
