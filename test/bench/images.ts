// Benchmark (issue "images"): POST /v1/images/generations over real HTTP (server, auth, meter,
// image worker thread, base64 JSON) against the bare pipeline (DiffusionPipeline.generate in this
// thread, PNG bytes), on the tiny flow-matching set (diffusers layout) and on the tiny Z-Image
// bundle (webnn/Z-Image-Turbo's layout: MatMulNBits q4f16 graphs, Qwen3 prompt encoder), same
// size, steps, seed and threads, same process. Target: HTTP ≥ 0.9× the bare pipeline's speed (median of per-round ratios) for the
// default request (512x512, 9 steps) and for 1024x1024. The sides alternate round by round, first
// one then the other, as a shared 2-core box drifts in speed. Every HTTP image must be
// byte-identical to the bare pipeline's. 256x256 is reported too but does not gate: the tiny set
// makes it in ~50 ms, against which the server's fixed few ms (auth, the SQLite usage row, base64
// and JSON of the PNG, the socket) and the box's noise decide the ratio; real models take seconds.
// BENCH_DEVICE=cuda (cpu by default): the models (engines.device) and the bare pipelines on
// onnxruntime's CUDA provider; each side falls back to the CPU as the product does (no provider,
// or a session that fails), and the run says where each computed. On a GPU an HTTP image that
// differs from the bare pipeline's is counted, not fatal (GPU kernels need not be bit-exact run to
// run). BENCH_IMAGE_SIZES=512 measures some sizes only (256, 512, 1024 by default).
import { rmSync } from "node:fs";
import { ensureDiffusionModel } from "../../models/diffusion/cache";
import { ensureZImageModel } from "../../models/diffusion/z-image";
import { validateConfig } from "../../src/lib/config";
import { DiffusionPipeline } from "../../src/3-engines/diffusion/pipeline";
import type { ImageEngine } from "../../src/3-engines/types";
import { createLogger } from "../../src/lib/log";
import { startServer } from "../../src/main";
import { tempDir } from "../helpers/app";
import { benchDevice } from "./chat-setup";
import { median } from "./stats";

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 16);
const THREADS = 2;
const SIZES = process.env.BENCH_IMAGE_SIZES?.split(",").map(Number);
const CASES = [
  { width: 256, height: 256, steps: 9, gates: false },
  { width: 512, height: 512, steps: 9, gates: true },
  { width: 1024, height: 1024, steps: 9, gates: true },
].filter((c) => !SIZES || SIZES.includes(c.width));
const PROMPT = "a lighthouse on a rocky coast at dusk, oil painting";


/** One set's figures, for a caller that tabulates them (test/gpu/device-check.sh); medians in ms. */
export interface ImageSetFigures {
  id: string;
  wanted: string;
  /** Where the server's workers computed (the CPU after a fallback), and the bare pipeline. */
  server: string;
  bare: string;
  /** The server's warnings about its ONNX device (why it fell back). */
  warnings: string[];
  cases: { size: string; bareMs: number; httpMs: number; ratio: number; differing: number }[];
}

export async function benchImages(): Promise<{ pass: boolean; sets: ImageSetFigures[] }> {
  const wanted = benchDevice();
  const sets = [
    { id: "bench-image", label: "the tiny flow-matching set (diffusers layout)", dir: ensureDiffusionModel("diffusion-turbo"), maxContext: 77 },
    { id: "bench-z-image", label: "the tiny Z-Image bundle (webnn layout, MatMulNBits q4f16)", dir: ensureZImageModel("z-image-tiny"), maxContext: 512 },
  ];
  const config = validateConfig({
    server: { data_dir: tempDir("appliance-bench-"), port: 0, log_level: "warn" },
    engines: { device: wanted, threads: THREADS },
    bootstrap: { credit_usd: 1000 },
    models: sets.map((set) => ({ id: set.id, name: set.label, kind: "image", files: { model: set.dir }, max_context: set.maxContext, slots: 1, load: "start" })),
  });
  let key = "";
  const warnings: string[] = [];
  const logger = createLogger({ level: "warn", write: (line) => {
    process.stdout.write(line);
    if (line.includes('"msg":"onnx device')) warnings.push(line.trim());
  } });
  const server = await startServer(config, { logger, banner: (l) => (key ||= /sk-apl-[0-9A-Za-z]{44}/.exec(l)?.[0] ?? "") });
  let pass = true;
  const figures: ImageSetFigures[] = [];
  try {
    for (const set of sets) {
      console.log(`images on ${set.label}, ${THREADS} threads, 1 image worker; ${ROUNDS} alternating rounds (medians)`);
      const own = warnings.filter((w) => w.includes(`"model":"${set.id}"`));
      const engine = server.deps.registry.engine(set.id, "image");
      // a worker whose CUDA session failed computes on the CPU and says so (image-worker.ts)
      const serverDevice = own.some((w) => w.includes("uses CPU") || w.includes("using CPU")) ? "cpu" : ((engine as { device?: string }).device ?? "cpu");
      const r = await benchSet(set, server, key, serverDevice);
      pass = r.pass && pass;
      figures.push({ id: set.id, wanted, server: serverDevice, bare: r.bare, warnings: own, cases: r.cases });
      if (wanted !== "cpu") console.log(`device: ${wanted} asked; the server's worker computed on ${serverDevice}, the bare pipeline on ${r.bare}${own.length ? ` (${own.join("; ")})` : ""}`);
    }
    console.log("target: HTTP ≥ 0.9× the bare pipeline at 512x512 and 1024x1024; every HTTP image byte-identical to the bare pipeline's");
    console.log("worker ms: the image worker's job as the server saw it; server's own ms: the rest of the HTTP time (auth, meter, JSON, base64, socket)");
  } finally {
    await server.stop();
    rmSync(config.server.data_dir, { recursive: true, force: true });
  }
  return { pass, sets: figures };
}

async function benchSet(set: { id: string; dir: string }, server: Awaited<ReturnType<typeof startServer>>, key: string, device: string): Promise<{ pass: boolean; bare: string; cases: ImageSetFigures["cases"] }> {
  const bare = await DiffusionPipeline.load(set.dir, { device: device === "cuda" ? "cuda" : "cpu", threads: THREADS });
  const cases: ImageSetFigures["cases"] = [];
  const worker = timeWorker(server.deps.registry.engine(set.id, "image"));

  const http = async (c: (typeof CASES)[number], seed: number) => {
    const t0 = performance.now();
    const res = await fetch(`${server.url}/v1/images/generations`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: set.id, prompt: PROMPT, size: `${c.width}x${c.height}`, steps: c.steps, seed }),
    });
    if (res.status !== 200) throw new Error(`status ${res.status}: ${await res.text()}`);
    const body = (await res.json()) as { data: { b64_json: string }[] };
    const png = Buffer.from(body.data[0]!.b64_json, "base64");
    return { ms: performance.now() - t0, png, workerMs: worker.lastMs };
  };
  const direct = async (c: (typeof CASES)[number], seed: number) => {
    const t0 = performance.now();
    const png = await bare.generate({ prompt: PROMPT, width: c.width, height: c.height, steps: c.steps, seed });
    return { ms: performance.now() - t0, png: Buffer.from(png) };
  };

  let pass = true;
  console.log(`size       steps   bare ms   http ms   (worker ms   server's own ms)   http/bare speed`);
  try {
    for (const c of CASES) {
      for (let i = 0; i < 2; i++) await direct(c, i).then(() => http(c, i)); // warm-up
      const rows: { bare: number; http: number; own: number; worker: number }[] = [];
      let differing = 0;
      for (let i = 0; i < ROUNDS; i++) {
        const seed = 1000 + i;
        let h, d;
        if (i % 2) (h = await http(c, seed)), (d = await direct(c, seed));
        else (d = await direct(c, seed)), (h = await http(c, seed));
        if (!h.png.equals(d.png)) {
          if (device === "cpu") throw new Error(`round ${i}: the HTTP image differs from the bare pipeline's`);
          differing++;
        }
        rows.push({ http: h.ms, bare: d.ms, own: h.ms - h.workerMs, worker: h.workerMs });
      }
      const ratio = median(rows.map((r) => r.bare / r.http));
      const ok = ratio >= 0.9;
      if (c.gates) pass &&= ok;
      cases.push({ size: `${c.width}x${c.height}`, bareMs: median(rows.map((r) => r.bare)), httpMs: median(rows.map((r) => r.http)), ratio, differing });
      console.log(
        `${`${c.width}x${c.height}`.padEnd(11)}${String(c.steps).padStart(5)}${median(rows.map((r) => r.bare)).toFixed(1).padStart(10)}` +
          `${median(rows.map((r) => r.http)).toFixed(1).padStart(10)}${median(rows.map((r) => r.worker)).toFixed(1).padStart(13)}` +
          `${median(rows.map((r) => r.own)).toFixed(2).padStart(18)}${ratio.toFixed(3).padStart(19)}  ${!c.gates ? "(reported only)" : ok ? "PASS" : "FAIL"}`,
      );
    }
  } finally {
    await bare.dispose();
  }
  return { pass, bare: bare.info.device, cases };
}

/** Times each job of the engine's workers, as the service sees it (bench instrumentation only). */
function timeWorker(engine: ImageEngine) {
  const marks = { lastMs: 0 };
  const acquire = engine.acquire.bind(engine);
  engine.acquire = async (signal) => {
    const lease = await acquire(signal);
    return {
      release: lease.release,
      generate: async (req, s) => {
        const t0 = performance.now();
        const png = await lease.generate(req, s);
        marks.lastMs = performance.now() - t0;
        return png;
      },
    };
  };
  return marks;
}

if (import.meta.main) process.exit((await benchImages()).pass ? 0 : 1);
