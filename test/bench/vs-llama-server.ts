// Benchmark (issue "chat throughput"): our streaming /v1/chat/completions against llama.cpp's own
// llama-server (same llama.cpp release, built by llama-server-build.ts), same generated model,
// 2 threads, 8 slots / -np 8, a ~163-token prompt text, 64 generated tokens per stream, at 1, 2, 4 and
// 8 concurrent streams. One server runs at a time (2 cores); the two alternate per round.
// Reports aggregate tok/s, per-stream decode tok/s and time to first token p50/p95, and the
// ratios. Targets: ≥ 0.9× at one stream, ≥ 1.0× at eight, our aggregate rising from 1 to 8.
//   BENCH_MODEL=bench-64m|bench-0.5b  BENCH_ROUNDS=2  bun run bench vs-llama-server
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ensureChatModel } from "../../models/cache";
import { SPECIAL_TOKENS } from "../../models/gguf/bpe";
import { tempDir } from "../helpers/app";
import { untilListening } from "../helpers/cli";
import { ensureLlamaServer } from "./llama-server-build";
import { readSseEvents } from "./sse-client";

const STREAMS = [1, 2, 4, 8];
const THREADS = Number(process.env.BENCH_THREADS ?? 2);
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

/** A new port per server start. */
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

async function measure(url: string, model: string, noEnd: Record<string, number>, seq: { n: number }) {
  await stream(url, model, seq.n++, noEnd); // warm-up
  const out: Record<number, { agg: number; decode: number; ttft50: number; ttft95: number }> = {};
  for (const k of STREAMS) {
    const all = await Promise.all(Array.from({ length: k }, () => stream(url, model, seq.n++, noEnd)));
    const agg = all.reduce((a, s) => a + s.tokens, 0) / (Math.max(...all.map((s) => s.wallMs)) / 1000);
    out[k] = { agg, decode: median(all.map((s) => s.decodeTps)), ttft50: median(all.map((s) => s.ttftMs)), ttft95: pct(all.map((s) => s.ttftMs), 0.95) };
  }
  return out;
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
  const rounds = Number(process.env.BENCH_ROUNDS ?? 2);
  const seq = { n: 0 };
  const results: { ours: any[]; theirs: any[] } = { ours: [], theirs: [] };
  try {
    const ctx = 8 * 512;
    const config = join(dir, "config.toml");
    writeFileSync(config, `[server]\nlog_level = "warn"\n[engines]\ndevice = "cpu"\nthreads = ${THREADS}\n[bootstrap]\ncredit_usd = 1000\n[rentals]\ndiscover = false\n` +
      `[[models]]\nid = "bench"\nname = "bench"\nkind = "chat"\nfiles = { model = "${modelPath}" }\nmax_context = 512\nslots = 8\nload = "start"\n`);
    const runOurs = async () => {
      const child = Bun.spawn([process.execPath, join(import.meta.dir, "..", "..", "cli", "main.ts"), "-c", config, "-d", join(dir, "data"), "serve", "--port", String(++nextPort)],
        { env: { ...process.env, HOME: dir }, stdout: "ignore", stderr: "pipe" });
      const started = await untilListening(child.stderr as ReadableStream<Uint8Array>);
      const url = started.url;
      // The first start of the data dir prints the admin key; later starts reuse it.
      oursKey = started.key ?? oursKey;
      try {
        return await measure(url, "bench", noEnd, seq);
      } finally {
        child.kill("SIGTERM");
        await child.exited;
      }
    };
    const runTheirs = async () => {
      const port = ++nextPort;
      const log = join(dir, `llama-server-${port}.log`);
      const child = Bun.spawn([bin, "-m", modelPath, "-t", String(THREADS), "-np", "8", "-c", String(ctx), "--port", String(port), "--host", "127.0.0.1", "--no-webui"], {
        stdout: "ignore",
        stderr: Bun.file(log),
      });
      const url = `http://127.0.0.1:${port}`;
      try {
        await waitHealthy(url);
        return await measure(url, "bench", noEnd, seq);
      } catch (e) {
        const tail = (await Bun.file(log).text().catch(() => "")).split("\n").slice(-15).join("\n");
        throw new Error(`${(e as Error).message}\nllama-server's log (last lines):\n${tail}`);
      } finally {
        // llama-server can stay in "cleaning up before exit" while our pooled keep-alive sockets are open
        child.kill("SIGTERM");
        if ((await Promise.race([child.exited, Bun.sleep(5000).then(() => "slow")])) === "slow") child.kill("SIGKILL");
        await child.exited;
      }
    };
    for (let r = 0; r < rounds; r++) {
      if (oursOnly) results.ours.push(await runOurs());
      else if (r % 2 === 0) {
        results.theirs.push(await runTheirs());
        results.ours.push(await runOurs());
      } else {
        results.ours.push(await runOurs());
        results.theirs.push(await runTheirs());
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const med = (side: any[], k: number, f: string) => median(side.map((r) => r[k][f]));
  if (oursOnly) {
    console.log(`model ${preset}, prompt ~${promptTokens} tokens, ${MAX_TOKENS} generated, ${THREADS} threads, ${rounds} rounds (medians), ours only`);
    for (const k of STREAMS)
      console.log(`${k} streams: ${med(results.ours, k, "agg").toFixed(0)} tok/s aggregate, decode ${med(results.ours, k, "decode").toFixed(0)} tok/s, ttft p50/p95 ${med(results.ours, k, "ttft50").toFixed(0)}/${med(results.ours, k, "ttft95").toFixed(0)} ms`);
    return { pass: false };
  }
  console.log(`model ${preset}, prompt ~${promptTokens} tokens, ${MAX_TOKENS} generated, ${THREADS} threads, ${rounds} rounds (medians)`);
  console.log("streams | llama-server agg tok/s (decode, ttft p50/p95 ms) | ours agg tok/s (decode, ttft p50/p95 ms) | ratio agg");
  const ratios: number[] = [];
  for (const k of STREAMS) {
    const t = (f: string) => med(results.theirs, k, f);
    const o = (f: string) => med(results.ours, k, f);
    ratios.push(o("agg") / t("agg"));
    console.log(`${k} | ${t("agg").toFixed(0)} (${t("decode").toFixed(0)}, ${t("ttft50").toFixed(0)}/${t("ttft95").toFixed(0)}) | ${o("agg").toFixed(0)} (${o("decode").toFixed(0)}, ${o("ttft50").toFixed(0)}/${o("ttft95").toFixed(0)}) | ${(o("agg") / t("agg")).toFixed(2)}×`);
  }
  const oursAgg = STREAMS.map((k) => med(results.ours, k, "agg"));
  const monotonic = oursAgg.every((v, i) => i === 0 || v >= oursAgg[i - 1]!);
  const pass = ratios[0]! >= 0.9 && ratios[3]! >= 1.0 && monotonic;
  console.log(`targets: 1 stream ≥ 0.9× (${ratios[0]!.toFixed(2)}), 8 streams ≥ 1.0× (${ratios[3]!.toFixed(2)}), ours rising 1→8 (${monotonic}): ${pass ? "PASS" : "FAIL"}`);
  return { pass };
}
