// Benchmark (issue "chat throughput"): our streaming /v1/chat/completions against llama.cpp's own
// llama-server (same llama.cpp release, built by llama-server-build.ts), same generated model,
// 2 threads, 8 slots / -np 8, a ~163-token prompt text, 64 generated tokens per stream, at 1, 2, 4 and
// 8 concurrent streams. Both servers are up for the whole run (an idle one uses no CPU) and every
// measurement is paired: at each stream count, each round, one server then the other (the order
// alternates), so both see the same state of this shared machine. Reports aggregate tok/s,
// per-stream decode tok/s and time to first token p50/p95 (medians over rounds), and the ratio
// (the median of the rounds' paired ratios). Targets: ≥ 0.9× at one stream, ≥ 1.0× at eight,
// our aggregate rising from 1 to 8.
//   BENCH_MODEL=bench-64m|bench-0.5b  BENCH_ROUNDS=5  bun run bench vs-llama-server
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ensureChatModel } from "../../models/cache";
import { SPECIAL_TOKENS } from "../../models/gguf/bpe";
import { tempDir } from "../helpers/app";
import { untilListening } from "../helpers/cli";
import { ensureLlamaServer } from "./llama-server-build";
import { readSseEvents } from "./sse-client";

// BENCH_STREAMS=8 (or "1,8") measures some stream counts only; the targets need 1 and 8
const STREAMS = (process.env.BENCH_STREAMS ?? "1,2,4,8").split(",").map(Number);
const THREADS = Number(process.env.BENCH_THREADS ?? 2);
// BENCH_LLAMA_SERVER_ARGS="-fa off" adds arguments to llama-server's command line (to compare one
// of its settings)
const EXTRA_ARGS = (process.env.BENCH_LLAMA_SERVER_ARGS ?? "").split(" ").filter(Boolean);
const MAX_TOKENS = 64;
const PROMPT =
  "You are reviewing the design of a small bridge over a river. " +
  "Describe in detail the loads on the deck, the choice between a beam, an arch and a suspension design, the materials, the foundations in soft river clay, " +
  "the expansion joints, how the structure is inspected every year, how ice and floods are handled, and what the maintenance schedule looks like over fifty years.";

interface Stream { ttftMs: number; decodeTps: number; tokens: number; wallMs: number }

async function stream(url: string, model: string, n: number, noEnd: Record<string, number>): Promise<Stream> {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/chat/completions`, {
    // a stream that stalls fails the run instead of hanging it
    signal: AbortSignal.timeout(120_000),
    // a new connection per stream, for both servers: a pooled socket that llama-server's keep-alive
    // timeout closes was reset on reuse (ECONNRESET), and open ones kept it from exiting
    keepalive: false,
    method: "POST",
    headers: { authorization: `Bearer ${oursKey || "none"}`, "content-type": "application/json" },
    body: JSON.stringify({
      model, stream: true, stream_options: { include_usage: true }, max_tokens: MAX_TOKENS, temperature: 0, logit_bias: noEnd,
      chat_template_kwargs: { enable_thinking: false }, messages: [{ role: "user", content: `Request ${n}. ${PROMPT}` }],
    }),
  });
  if (res.status !== 200) throw new Error(`${url}: ${res.status} ${await res.text()}`);
  let first = 0, last = 0, tokens = 0, pieces = 0;
  await readSseEvents(res, (c, now) => {
    if (c.usage?.completion_tokens) tokens = c.usage.completion_tokens;
    if (c.choices?.[0]?.delta?.content) {
      pieces++;
      if (!first) first = now;
      last = now;
    }
  });
  tokens ||= pieces;
  return { ttftMs: first - t0, decodeTps: (tokens - 1) / ((last - first) / 1000), tokens, wallMs: last - t0 };
}

let nextPort = 18600;
/** Our server's admin key (printed at its first start); llama-server accepts any. */
let oursKey = "";
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))]!;
const median = (xs: number[]) => pct(xs, 0.5);

async function waitHealthy(url: string) {
  for (let i = 0; i < 600; i++) {
    if (await fetch(`${url}/health`).then((r) => r.ok).catch(() => false)) return;
    await Bun.sleep(100);
  }
  throw new Error(`${url} never became healthy`);
}

type Figures = { agg: number; decode: number; ttft50: number; ttft95: number };

/** `k` concurrent streams against one server. */
async function measure(url: string, k: number, noEnd: Record<string, number>, seq: { n: number }): Promise<Figures> {
  const all = await Promise.all(Array.from({ length: k }, () => stream(url, "bench", seq.n++, noEnd)));
  const agg = all.reduce((a, s) => a + s.tokens, 0) / (Math.max(...all.map((s) => s.wallMs)) / 1000);
  return { agg, decode: median(all.map((s) => s.decodeTps)), ttft50: median(all.map((s) => s.ttftMs)), ttft95: pct(all.map((s) => s.ttftMs), 0.95) };
}

export async function benchVsLlamaServer() {
  const preset = (process.env.BENCH_MODEL ?? "bench-64m") as "bench-64m" | "bench-0.5b";
  const modelPath = await ensureChatModel(preset);
  // BENCH_OURS_ONLY=1 measures our side alone (no llama-server build): the figures without ratios.
  const oursOnly = process.env.BENCH_OURS_ONLY === "1";
  const bin = oursOnly ? "" : ensureLlamaServer();
  const { getLlama } = await import("node-llama-cpp");
  const llama = await getLlama({ build: "never", gpu: false });
  const m = await llama.loadModel({ modelPath });
  const noEnd = Object.fromEntries(SPECIAL_TOKENS.flatMap((t) => m.tokenize(t, true)).map((t) => [String(t), -100]));
  const promptTokens = m.tokenize(PROMPT).length;
  await m.dispose();
  const dir = tempDir("appliance-vs-");
  const rounds = Number(process.env.BENCH_ROUNDS ?? 5);
  const seq = { n: 0 };
  const results: Record<"ours" | "theirs", Record<number, Figures[]>> = { ours: {}, theirs: {} };
  const children: Bun.Subprocess[] = [];
  const log = join(dir, "llama-server.log");
  try {
    const config = join(dir, "config.toml");
    writeFileSync(config, `[server]\nlog_level = "warn"\n[engines]\ndevice = "cpu"\nthreads = ${THREADS}\n[bootstrap]\ncredit_usd = 1000\n[rentals]\ndiscover = false\n` +
      `[[models]]\nid = "bench"\nname = "bench"\nkind = "chat"\nfiles = { model = "${modelPath}" }\nmax_context = 512\nslots = 8\nload = "start"\n`);
    const ours = Bun.spawn([process.execPath, join(import.meta.dir, "..", "..", "cli", "main.ts"), "-c", config, "-d", join(dir, "data"), "serve", "--port", String(++nextPort)],
      { env: { ...process.env, HOME: dir }, stdout: "ignore", stderr: "pipe" });
    children.push(ours);
    const started = await untilListening(ours.stderr as ReadableStream<Uint8Array>);
    oursKey = started.key ?? "";
    const urls: Record<"ours" | "theirs", string> = { ours: started.url, theirs: "" };
    if (!oursOnly) {
      const port = ++nextPort;
      // the same 8 × 512 tokens of context as ours
      children.push(Bun.spawn([bin, "-m", modelPath, "-t", String(THREADS), "-np", "8", "-c", String(8 * 512), "--port", String(port), "--host", "127.0.0.1", "--no-webui", ...EXTRA_ARGS], {
        stdout: "ignore",
        stderr: Bun.file(log),
      }));
      urls.theirs = `http://127.0.0.1:${port}`;
      await waitHealthy(urls.theirs);
    }
    const sides = oursOnly ? (["ours"] as const) : (["theirs", "ours"] as const);
    for (const side of sides) await stream(urls[side], "bench", seq.n++, noEnd); // warm-up
    for (let r = 0; r < rounds; r++)
      for (const k of STREAMS)
        for (const side of r % 2 === 0 ? sides : [...sides].reverse()) {
          const figures = await measure(urls[side], k, noEnd, seq).catch(async (e: Error) => {
            const tail = side === "theirs" ? (await Bun.file(log).text().catch(() => "")).split("\n").slice(-15).join("\n") : "";
            throw new Error(`${side}: ${e.message}${tail ? `\nllama-server's log (last lines):\n${tail}` : ""}`);
          });
          (results[side][k] ??= []).push(figures);
        }
  } finally {
    for (const child of children) {
      child.kill("SIGTERM");
      if ((await Promise.race([child.exited, Bun.sleep(5000).then(() => "slow")])) === "slow") child.kill("SIGKILL");
      await child.exited;
    }
    rmSync(dir, { recursive: true, force: true });
  }
  const med = (side: "ours" | "theirs", k: number, f: keyof Figures) => median(results[side][k]!.map((x) => x[f]));
  const row = (side: "ours" | "theirs", k: number) =>
    `${med(side, k, "agg").toFixed(0)} (${med(side, k, "decode").toFixed(0)}, ${med(side, k, "ttft50").toFixed(0)}/${med(side, k, "ttft95").toFixed(0)})`;
  if (oursOnly) {
    console.log(`model ${preset}, prompt ~${promptTokens} tokens, ${MAX_TOKENS} generated, ${THREADS} threads, ${rounds} rounds (medians), ours only`);
    for (const k of STREAMS) console.log(`${k} streams: ${row("ours", k)} — aggregate tok/s (decode tok/s, ttft p50/p95 ms)`);
    return { pass: false };
  }
  console.log(`model ${preset}, prompt ~${promptTokens} tokens, ${MAX_TOKENS} generated, ${THREADS} threads, ${rounds} paired rounds (medians)`);
  console.log("streams | llama-server agg tok/s (decode, ttft p50/p95 ms) | ours agg tok/s (decode, ttft p50/p95 ms) | ratio agg (median of paired)");
  const ratios = STREAMS.map((k) => median(results.ours[k]!.map((o, i) => o.agg / results.theirs[k]![i]!.agg)));
  STREAMS.forEach((k, i) => console.log(`${k} | ${row("theirs", k)} | ${row("ours", k)} | ${ratios[i]!.toFixed(2)}×`));
  for (const k of STREAMS)
    console.log(`  ${k} stream(s), aggregate tok/s per round, llama-server/ours: ${results.theirs[k]!.map((t, i) => `${t.agg.toFixed(0)}/${results.ours[k]![i]!.agg.toFixed(0)}`).join(", ")}`);
  const oursAgg = STREAMS.map((k) => med("ours", k, "agg"));
  const monotonic = oursAgg.every((v, i) => i === 0 || v >= oursAgg[i - 1]!);
  const at = (k: number) => ratios[STREAMS.indexOf(k)];
  const one = at(1), eight = at(8);
  const pass = one !== undefined && eight !== undefined && one >= 0.9 && eight >= 1.0 && monotonic;
  const shown = (r: number | undefined) => (r === undefined ? "not measured" : r.toFixed(2));
  console.log(`targets: 1 stream ≥ 0.9× (${shown(one)}), 8 streams ≥ 1.0× (${shown(eight)}), ours rising 1→8 (${monotonic}): ${pass ? "PASS" : "FAIL"}`);
  return { pass };
}
