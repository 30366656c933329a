import { ensureChatModel } from "../../models/cache";
import { cudaBuildName, probeCudaDecode, type CudaBuild } from "../../src/3-engines/llama/cuda-probe";
import { assembleCudaLib } from "./cuda-lib";
import { addRow, firstLine, fmt } from "./rows";

// Step 1 of the device check (test/gpu/device-check.sh): which llama.cpp builds load and decode.
// Each CUDA build there is (the source build, node-llama-cpp's CUDA 13 and CUDA 12 builds, from the
// lib folder cuda-lib.ts lays out and cuda-bins-preload.ts points node-llama-cpp at) goes through
// the product's own decode probe (probeCudaDecode: a child offloads a tiny model and decodes); one
// that passes is then measured by a child of this file, as are the Vulkan and CPU builds: the
// devices the build lists, layers offloaded, decode tok/s on the probe's model. Each CUDA build that
// decodes is printed ("cuda-decodes: 13"): the script takes the first in the runtime's order
// (source, 13, 12) for the steps after.
//   bun test/gpu/probe.ts cuda,vulkan,cpu          (the parent: rows; cuda:13+12 or cuda:source probes those builds only)
//   bun test/gpu/probe.ts --child cuda|vulkan|cpu   (one measurement, printed as JSON)

type Kind = "cuda" | "vulkan" | "cpu";
const TOKENS = 32;

interface Measured {
  gpus: string[];
  gpuLayers: number;
  layers: number;
  decodeTps: number;
  vram: { used: number; total: number } | null;
}

/** The child: load the build, offload the probe's model, decode TOKENS tokens. */
async function measure(kind: Kind): Promise<Measured> {
  const { getLlama } = await import("node-llama-cpp");
  const llama = await getLlama({ gpu: kind === "cpu" ? false : kind, build: "never", skipDownload: true, progressLogs: false, maxThreads: 2 });
  const gpus = kind === "cpu" ? [] : await llama.getGpuDeviceNames().catch(() => []);
  if (kind !== "cpu" && gpus.length === 0) throw new Error(`node-llama-cpp's ${kind} build loaded but lists no device`);
  const model = await llama.loadModel({ modelPath: await ensureChatModel("small-chat"), gpuLayers: kind === "cpu" ? 0 : "max" });
  const context = await model.createContext({ contextSize: 256, batchSize: 64, sequences: 1 });
  const sequence = context.getSequence();
  let n = 0;
  let first = 0;
  for await (const _ of sequence.evaluate(model.tokenize("hello there"), { temperature: 0 })) {
    if (n++ === 0) first = performance.now();
    if (n >= TOKENS) break;
  }
  const decodeTps = (TOKENS - 1) / ((performance.now() - first) / 1000);
  const vram = kind === "cpu" ? null : await llama.getVramState().then((v) => ({ used: v.used, total: v.total })).catch(() => null);
  return { gpus, gpuLayers: model.gpuLayers, layers: model.fileInsights.totalLayers, decodeTps, vram };
}

/** Runs the child for `kind` with `env` added; its measurement, or why there is none. */
async function measured(kind: Kind, env: Record<string, string | undefined> = {}): Promise<Measured | string> {
  const child = Bun.spawn([process.execPath, import.meta.path, "--child", kind], { env: { ...process.env, ...env }, stdout: "pipe", stderr: "pipe" });
  const timer = setTimeout(() => child.kill("SIGKILL"), 180_000);
  const [out, err, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  clearTimeout(timer);
  const line = out.split("\n").find((l) => l.startsWith("probe-result "));
  if (code === 0 && line) return JSON.parse(line.slice("probe-result ".length)) as Measured;
  const why = `${out}\n${err}`.split("\n").find((l) => /probe-error|CUDA error|error/i.test(l))?.replace(/^.*probe-error: /, "");
  return `${child.signalCode ? `killed by ${child.signalCode}` : `exit ${code}`}${why ? `: ${why.trim().slice(0, 300)}` : ""}`;
}

const MiB = 1024 * 1024;
const figure = (m: Measured) => `${fmt(m.decodeTps)} tok/s decode (small-chat, ${TOKENS} tokens)`;
const notes = (m: Measured) =>
  [m.gpus.length ? m.gpus.join(", ") : "", `${m.gpuLayers}/${m.layers} layers offloaded`, m.vram ? `device memory ${fmt(m.vram.used / MiB)}/${fmt(m.vram.total / MiB)} MiB` : ""].filter(Boolean).join("; ");

async function probeCuda(builds: CudaBuild[]): Promise<void> {
  const lib = assembleCudaLib(process.env.DEVICE_CHECK_LIB ?? "");
  for (const build of builds) {
    const check = `decode probe: ${cudaBuildName(build)}`;
    if (!lib.builds[build]) {
      addRow({ check, device: "cuda", result: "absent", notes: build === "source" ? "not built (the source build step says why)" : "its files are not installed" });
      continue;
    }
    const t0 = performance.now();
    // the product's probe, from the checkout (the preload makes APPLIANCE_LLAMA_CUDA_BUILD choose the folder)
    const why = await probeCudaDecode(build, 120_000);
    const s = ((performance.now() - t0) / 1000).toFixed(1);
    if (why !== null) {
      addRow({ check, device: "cuda", result: "fails", figure: `probe ${s} s`, notes: why });
      continue;
    }
    console.log(`cuda-decodes: ${build}`);
    const m = await measured("cuda", { APPLIANCE_LLAMA_CUDA_BUILD: build === "13" ? undefined : build, DEVICE_CHECK_CUDA_BUILD: build });
    if (typeof m === "string") addRow({ check, device: "cuda", result: "decodes", figure: `probe ${s} s`, notes: `the probe passed; the measurement failed (${m})` });
    else addRow({ check, device: "cuda", result: "decodes", figure: figure(m), notes: `${notes(m)}; probe ${s} s` });
  }
}

async function probeOther(kind: "vulkan" | "cpu") {
  const check = kind === "cpu" ? "decode: node-llama-cpp's CPU build" : "decode: node-llama-cpp's Vulkan build";
  const m = await measured(kind);
  if (typeof m === "string") addRow({ check, device: kind, result: "fails", notes: m });
  else addRow({ check, device: kind, result: "decodes", figure: figure(m), notes: notes(m) });
}

const args = process.argv.slice(2);
if (args[0] === "--child") {
  try {
    console.log(`probe-result ${JSON.stringify(await measure(args[1] as Kind))}`);
    process.exit(0);
  } catch (e) {
    console.log(`probe-error: ${firstLine(e)}`);
    process.exit(1);
  }
} else {
  for (const arg of (args[0] ?? "cuda,vulkan,cpu").split(",").filter(Boolean)) {
    const [d, which] = arg.split(":");
    try {
      if (d === "cuda") await probeCuda(which ? (which.split("+") as CudaBuild[]) : ["source", "13", "12"]);
      else if (d === "vulkan" || d === "cpu") await probeOther(d);
      else throw new Error(`not a device: ${d}`);
    } catch (e) {
      addRow({ check: `decode probe (${arg})`, device: d ?? arg, result: "error", notes: firstLine(e) });
    }
  }
}
