// Benchmark (issue "embeddings and classify"): /v1/embeddings over real HTTP on a generated
// MiniLM-L6-shaped model (384-d, 6 layers, 12 heads, FFN 1536; random weights, fp32, 2 threads),
// where the model's compute dominates. Targets:
//   1. 32 sentences in one request reach ≥ 0.9× the throughput of the bare transformers.js
//      feature-extraction pipeline (mean pooling, normalised) on the same model and threads; the
//      serving engine called directly (tokenize + embed) is printed too: the gap to it is what
//      HTTP, auth, billing and JSON add;
//   2. 32 concurrent one-sentence requests reach ≥ 2× the throughput of the same 32 sent one
//      after another (micro-batching).
// BENCH_DEVICE=cuda (cpu by default): the model (engines.device) and the bare pipeline on
// onnxruntime's CUDA provider; where the server fell back to the CPU (no provider, or its session
// failed), the bare pipeline runs there too and the run says so.
import { ensureOnnxModel } from "../../models/onnx/cache";
import { WORDPIECE_CORPUS } from "../../models/onnx/corpus";
import { validateConfig } from "../../src/lib/config";
import { createLogger } from "../../src/lib/log";
import { startServer } from "../../src/main";
import { tempDir } from "../helpers/app";
import { benchDevice } from "./chat-setup";
import { median } from "./stats";

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 11);
const THREADS = 2;
const SENTENCES = WORDPIECE_CORPUS.split("\n")
  .map((l) => l.trim())
  .filter(Boolean)
  .slice(0, 32);


async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

/** What a run measured and where, for a caller that tabulates it (test/gpu/device-check.sh); medians in ms. */
export interface EmbeddingsFigures {
  wanted: string;
  /** The device the server's engine computed on (the CPU after a fallback). */
  device: string;
  /** The server's warnings about its ONNX device (why it fell back). */
  warnings: string[];
  http32: number;
  bare32: number;
  serial32: number;
  concurrent32: number;
}

export async function benchEmbeddings(): Promise<{ pass: boolean; figures: EmbeddingsFigures }> {
  const wanted = benchDevice();
  const folder = await ensureOnnxModel("embed-bench");
  const config = validateConfig({
    server: { data_dir: tempDir("appliance-bench-"), port: 0, log_level: "warn" },
    engines: { device: wanted, threads: THREADS },
    bootstrap: { credit_usd: 1000 },
    models: [{ id: "bench-embed", name: "bench", kind: "embedding", files: { model: folder }, max_context: 512, load: "start" }],
  });
  let key = "";
  const warnings: string[] = [];
  const logger = createLogger({ level: "warn", write: (line) => {
    process.stdout.write(line);
    if (line.includes('"msg":"onnx device')) warnings.push(line.trim());
  } });
  const server = await startServer(config, { logger, banner: (l) => (key ||= /sk-apl-[0-9A-Za-z]{44}/.exec(l)?.[0] ?? "") });
  // The engine serving the requests: where it really computes (the CPU after a CUDA fallback).
  const engine = server.deps.registry.engine("bench-embed", "embedding");
  const device = (engine as { device?: string }).device === "cuda" ? "cuda" : "cpu";
  const { pipeline } = await import("@huggingface/transformers");
  const extractor = await pipeline("feature-extraction", folder, {
    local_files_only: true,
    device,
    dtype: "fp32",
    session_options: { intraOpNumThreads: THREADS, interOpNumThreads: 1 },
  });
  const embed = async (input: string | string[]) => {
    const res = await fetch(`${server.url}/v1/embeddings`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "bench-embed", input, encoding_format: "float" }),
    });
    if (res.status !== 200) throw new Error(`${res.status} ${await res.text()}`);
    return res.json();
  };
  const bare = () => extractor(SENTENCES, { pooling: "mean", normalize: true });
  // The engine called directly: tokenize + embed, no HTTP, no service.
  const direct = async () => engine.embed(await engine.tokenize(SENTENCES));
  const runs = { http: [] as number[], bare: [] as number[], direct: [] as number[], serial: [] as number[], concurrent: [] as number[] };
  try {
    await bare();
    await embed(SENTENCES);
    await Promise.all(SENTENCES.map((s) => embed(s)));
    for (let i = 0; i < ROUNDS; i++) {
      // Alternate the order so that drift on a shared box hits both sides alike.
      const one = [
        async () => runs.http.push(await timed(() => embed(SENTENCES))),
        async () => runs.bare.push(await timed(bare)),
        async () => runs.direct.push(await timed(direct)),
      ];
      for (const f of i % 2 ? one.reverse() : one) await f();
      const load = [
        async () => runs.serial.push(await timed(async () => { for (const s of SENTENCES) await embed(s); })),
        async () => runs.concurrent.push(await timed(() => Promise.all(SENTENCES.map((s) => embed(s))))),
      ];
      for (const f of i % 2 ? load.reverse() : load) await f();
    }
  } finally {
    await extractor.dispose();
    await server.stop();
  }
  const batchRatio = median(runs.http.map((h, i) => runs.bare[i]! / h));
  const directRatio = median(runs.http.map((h, i) => runs.direct[i]! / h));
  const concurrencyRatio = median(runs.serial.map((s, i) => s / runs.concurrent[i]!));
  const pass1 = batchRatio >= 0.9;
  const pass2 = concurrencyRatio >= 2;
  if (wanted !== "cpu") console.log(`device: ${wanted} asked, the model computed on ${device}${warnings.length ? ` (${warnings.join("; ")})` : ""}`);
  console.log(`embeddings on embed-bench (MiniLM-L6 shape, fp32), ${THREADS} threads, ${SENTENCES.length} sentences; ${ROUNDS} rounds, alternating order (medians)`);
  console.log(`bare pipeline, 32 sentences          ${median(runs.bare).toFixed(1).padStart(8)} ms`);
  console.log(`engine called directly, 32 sentences ${median(runs.direct).toFixed(1).padStart(8)} ms`);
  console.log(`one HTTP request, 32 sentences       ${median(runs.http).toFixed(1).padStart(8)} ms   throughput ratio vs pipeline ${batchRatio.toFixed(3)} (target ≥ 0.9)  ${pass1 ? "PASS" : "FAIL"}; vs engine ${directRatio.toFixed(3)}`);
  console.log(`32 one-sentence requests, serial     ${median(runs.serial).toFixed(1).padStart(8)} ms`);
  console.log(`32 one-sentence requests, concurrent ${median(runs.concurrent).toFixed(1).padStart(8)} ms   throughput ratio ${concurrencyRatio.toFixed(3)} (target ≥ 2)  ${pass2 ? "PASS" : "FAIL"}`);
  const figures = { wanted, device, warnings, http32: median(runs.http), bare32: median(runs.bare), serial32: median(runs.serial), concurrent32: median(runs.concurrent) };
  return { pass: pass1 && pass2, figures };
}

if (import.meta.main) process.exit((await benchEmbeddings()).pass ? 0 : 1);
