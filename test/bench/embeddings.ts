// Benchmark (issue "embeddings and classify"): /v1/embeddings over real HTTP on a generated
// MiniLM-L6-shaped model (384-d, 6 layers, 12 heads, FFN 1536; random weights, fp32, 2 threads),
// where the model's compute dominates. Targets:
//   1. 32 sentences in one request reach ≥ 0.9× the throughput of the bare transformers.js
//      feature-extraction pipeline (mean pooling, normalised) on the same model and threads; the
//      serving engine called directly (tokenize + embed) is printed too: the gap to it is what
//      HTTP, auth, billing and JSON add;
//   2. 32 concurrent one-sentence requests reach ≥ 2× the throughput of the same 32 sent one
//      after another (micro-batching).
import { ensureOnnxModel } from "../../models/onnx/cache";
import { WORDPIECE_CORPUS } from "../../models/onnx/corpus";
import { validateConfig } from "../../src/lib/config";
import { createLogger } from "../../src/lib/log";
import { startServer } from "../../src/main";
import { tempDir } from "../helpers/app";
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

export async function benchEmbeddings() {
  const folder = await ensureOnnxModel("embed-bench");
  const config = validateConfig({
    server: { data_dir: tempDir("appliance-bench-"), port: 0, log_level: "warn" },
    engines: { device: "cpu", threads: THREADS },
    bootstrap: { credit_usd: 1000 },
    models: [{ id: "bench-embed", name: "bench", kind: "embedding", files: { model: folder }, max_context: 512, load: "start" }],
  });
  let key = "";
  const server = await startServer(config, { logger: createLogger({ level: "warn" }), banner: (l) => (key ||= /sk-apl-[0-9A-Za-z]{44}/.exec(l)?.[0] ?? "") });
  const { pipeline } = await import("@huggingface/transformers");
  const extractor = await pipeline("feature-extraction", folder, {
    local_files_only: true,
    device: "cpu",
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
  // The engine serving the requests, called directly: tokenize + embed, no HTTP, no service.
  const engine = server.deps.registry.engine("bench-embed", "embedding");
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
  console.log(`embeddings on embed-bench (MiniLM-L6 shape, fp32), ${THREADS} threads, ${SENTENCES.length} sentences; ${ROUNDS} rounds, alternating order (medians)`);
  console.log(`bare pipeline, 32 sentences          ${median(runs.bare).toFixed(1).padStart(8)} ms`);
  console.log(`engine called directly, 32 sentences ${median(runs.direct).toFixed(1).padStart(8)} ms`);
  console.log(`one HTTP request, 32 sentences       ${median(runs.http).toFixed(1).padStart(8)} ms   throughput ratio vs pipeline ${batchRatio.toFixed(3)} (target ≥ 0.9)  ${pass1 ? "PASS" : "FAIL"}; vs engine ${directRatio.toFixed(3)}`);
  console.log(`32 one-sentence requests, serial     ${median(runs.serial).toFixed(1).padStart(8)} ms`);
  console.log(`32 one-sentence requests, concurrent ${median(runs.concurrent).toFixed(1).padStart(8)} ms   throughput ratio ${concurrencyRatio.toFixed(3)} (target ≥ 2)  ${pass2 ? "PASS" : "FAIL"}`);
  return { pass: pass1 && pass2 };
}

if (import.meta.main) process.exit((await benchEmbeddings()).pass ? 0 : 1);
