// Benchmark (issues "chat throughput" and 29): our streaming /v1/chat/completions against llama.cpp's
// own llama-server (same llama.cpp release, built by llama-server-build.ts and linked against the
// very libllama/libggml our engine runs), same generated model, 2 threads, 8 slots / -np 8, a
// ~163-token prompt text, 64 generated tokens per stream, at 1, 2, 4 and 8 concurrent streams. Both
// servers are up for the whole run (an idle one uses no CPU) and every measurement is paired: at
// each stream count, each round, one server then the other (the order alternates), so both see the
// same state of this shared machine. Reports aggregate tok/s, per-stream decode tok/s and time to
// first token p50/p95 (medians over rounds), and two ratios, ours/llama-server: aggregate and
// per-stream decode (each the median of the rounds' paired ratios), and each server's CPU per
// generated token (ours: and its JavaScript thread's). Targets (issue 29): both ratios ≥ 1.0× at
// every stream count.
//   BENCH_MODEL: bench-64m (default, a ~3 ms step here), bench-1ms (a ~1 ms step on 2 threads: a
//     GPU's step time, where a server's own work per step shows), bench-0.5b
//   BENCH_MIX=constrained: every other stream generates under a grammar, alternating between
//     response_format json_schema and a tool call (tools + tool_choice "required"), the same fields to
//     both servers (llama-server runs with --jinja), plus, to llama-server only, an assistant prefill
//     that opens the call (CALL_OPEN: its "required" admits free text first). Both outputs are
//     checked for their constraint; decode tok/s per kind is listed too.
//   BENCH_TRACE=1: each measurement's streams, when each was sent, had its first and last token
//   BENCH_BASELINE=<folder>: the other side is our own server from another checkout of this project
//     (an older commit, its dependencies installed and its llama addon built) instead of llama-server,
//     on the same config: "is this change faster than what we had", side by side. No prefill there.
//   BENCH_DEVICE=cuda|vulkan (cpu by default): the model's layers on that GPU on both sides (ours:
//     engines.device; llama-server: -ngl 999 and the matching ggml backend library, chat-setup.ts);
//     BENCH_GGML_BACKEND names llama-server's backend library when it is not node-llama-cpp's own
//   BENCH_SLOTS=32: slots on both servers (8 by default; 32 streams on 8 slots queue 24 of them)
//   BENCH_ROUNDS=5  BENCH_STREAMS=1,2,4,8  bun run bench vs-llama-server
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { ensureChatModel } from "../../models/cache";
import { isChatPresetName } from "../../models/presets";
import { SPECIAL_TOKENS } from "../../models/gguf/bpe";
import { tempDir } from "../helpers/app";
import { untilListening } from "../helpers/cli";
import { benchDevice, llamaServerDevices, llamaServerOnDevice } from "./chat-setup";
import { ensureLlamaServer } from "./llama-server-build";
import { readSseEvents } from "./sse-client";
import { median, pct } from "./stats";

// BENCH_STREAMS=8 (or "1,8") measures some stream counts only; the targets need 1 and 8
const STREAMS = (process.env.BENCH_STREAMS ?? "1,2,4,8").split(",").map(Number);
const THREADS = Number(process.env.BENCH_THREADS ?? 2);
const SLOTS = Number(process.env.BENCH_SLOTS ?? 8);
// BENCH_LLAMA_SERVER_ARGS="-fa off" adds arguments to llama-server's command line (to compare one
// of its settings)
const EXTRA_ARGS = (process.env.BENCH_LLAMA_SERVER_ARGS ?? "").split(" ").filter(Boolean);
const MAX_TOKENS = 64;
/** Pause before each measurement (BENCH_SETTLE_MS), so neither server runs while the other's threads still spin. */
const SETTLE_MS = Number(process.env.BENCH_SETTLE_MS ?? 1000);
// BENCH_MIX=constrained: half the streams under a grammar (see the header)
const MIX = process.env.BENCH_MIX ?? "plain";
// BENCH_BASELINE: a checkout of this project whose server is the other side (see the header)
const BASELINE = process.env.BENCH_BASELINE ? resolve(process.env.BENCH_BASELINE) : "";
/** Who the other side is, in the report. */
const THEIRS = BASELINE ? `baseline ${basename(BASELINE)}` : "llama-server";
// context per slot, on both servers: a tool stream's prompt (the tool listed in the system turn) takes ~470 tokens
const SLOT_CONTEXT = MIX === "constrained" ? 1024 : 512;
const PROMPT =
  "You are reviewing the design of a small bridge over a river. " +
  "Describe in detail the loads on the deck, the choice between a beam, an arch and a suspension design, the materials, the foundations in soft river clay, " +
  "the expansion joints, how the structure is inspected every year, how ice and floods are handled, and what the maintenance schedule looks like over fifty years.";

type Kind = "plain" | "json" | "tool";
type Side = "ours" | "theirs";

/** What the constrained streams generate: a small object with two free strings (the model writes on inside them). */
const SCHEMA = {
  type: "object",
  properties: { title: { type: "string" }, notes: { type: "string" } },
  required: ["title", "notes"],
  additionalProperties: false,
};
const CONSTRAINTS: Record<Kind, Record<string, unknown>> = {
  plain: {},
  json: { response_format: { type: "json_schema", json_schema: { name: "review", strict: true, schema: SCHEMA } } },
  tool: {
    tools: [{ type: "function", function: { name: "record_review", description: "Records a design review.", parameters: SCHEMA } }],
    tool_choice: "required",
  },
};
/**
 * What llama-server gets beyond ours, on tool streams: an assistant prefill that opens the
 * call. Its grammar for tool_choice "required" lets free text come first (content before the call
 * marker: common/chat-auto-parser-generator.cpp), which a random model never leaves in 64 tokens;
 * ours opens the call at once. With the prefill both generate the call's JSON under their grammars.
 */
const CALL_OPEN = { role: "assistant", content: "<tool_call>\n" };

/**
 * Stream `i` of a measurement in round `r`: with BENCH_MIX=constrained the even ones are
 * constrained, json_schema and tool call taking turns (and swapping each round, so one stream sees
 * both); the same for both servers.
 */
function kindOf(i: number, r: number): Kind {
  if (MIX !== "constrained" || i % 2 === 1) return "plain";
  return (i / 2 + r) % 2 === 0 ? "json" : "tool";
}

/**
 * One stream's figures. decodeTps is tokens after the first over the time from the first delta to
 * the last: exact for text and json_schema, whose first delta is the first token; a tool call's
 * first delta comes only once its header (name, "arguments") is generated, a number of tokens
 * neither server reports, so a tool stream's decodeTps is NaN and deltaTps (one over the median gap
 * between its deltas, about a token each) stands in, listed by kind only.
 */
interface Stream { kind: Kind; startMs: number; firstMs: number; ttftMs: number; decodeTps: number; deltaTps: number; tokens: number; wallMs: number; text: string; called: boolean }

async function stream(side: Side, url: string, model: string, n: number, noEnd: Record<string, number>, kind: Kind = "plain"): Promise<Stream> {
  const messages = [{ role: "user", content: `Request ${n}. ${PROMPT}` }, ...(side === "theirs" && !BASELINE && kind === "tool" ? [CALL_OPEN] : [])];
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/chat/completions`, {
    // a stream that stalls fails the run instead of hanging it
    signal: AbortSignal.timeout(120_000),
    // a new connection per stream, for both servers: a pooled socket that llama-server's keep-alive
    // timeout closes was reset on reuse (ECONNRESET), and open ones kept it from exiting
    keepalive: false,
    method: "POST",
    headers: { authorization: `Bearer ${keys[side] || "none"}`, "content-type": "application/json" },
    body: JSON.stringify({
      model, stream: true, stream_options: { include_usage: true }, max_tokens: MAX_TOKENS, temperature: 0, logit_bias: noEnd,
      chat_template_kwargs: { enable_thinking: false }, messages, ...CONSTRAINTS[kind],
    }),
  });
  if (res.status !== 200) throw new Error(`${url}: ${res.status} ${await res.text()}`);
  let first = 0, last = 0, tokens = 0, pieces = 0, text = "", called = false;
  const gaps: number[] = [];
  await readSseEvents(res, (c, now) => {
    if (c.usage?.completion_tokens) tokens = c.usage.completion_tokens;
    const d = c.choices?.[0]?.delta;
    // generated text: the answer, or a tool call's arguments
    const piece = (d?.content ?? "") + (d?.tool_calls ?? []).map((t: { function?: { arguments?: string } }) => t.function?.arguments ?? "").join("");
    if (d?.tool_calls?.length) called = true;
    if (piece) {
      pieces++;
      text += piece;
      if (!first) first = now;
      else gaps.push(now - last);
      last = now;
    }
  });
  tokens ||= pieces;
  const decodeTps = kind === "tool" ? NaN : (tokens - 1) / ((last - first) / 1000);
  return { kind, startMs: t0, firstMs: first, ttftMs: first - t0, decodeTps, deltaTps: 1000 / median(gaps), tokens, wallMs: last - t0, text, called };
}

/** Whether a stream's output shows its constraint was applied (a server that ignored a field fails the run). */
function constrained(s: Stream): boolean {
  if (s.kind === "json") return !s.called && /^\s*(```json\s*)?\{/.test(s.text);
  if (s.kind === "tool") return s.called && s.text.trimStart().startsWith("{");
  return true;
}

let nextPort = 18600;
/** Our server's admin key (printed at its first start), a baseline's too; llama-server accepts any. */
const keys: Record<Side, string> = { ours: "", theirs: "" };
/** The end of what our server (and a baseline) wrote to stderr after its banner. */
const stderrTails: Record<Side, string> = { ours: "", theirs: "" };
/** The median of the finite values (NaN when there are none: a tool stream's decode). */
const medianOf = (xs: number[]) => (xs.some(Number.isFinite) ? median(xs.filter(Number.isFinite)) : NaN);

export async function waitHealthy(url: string) {
  for (let i = 0; i < 600; i++) {
    if (await fetch(`${url}/health`).then((r) => r.ok).catch(() => false)) return;
    await Bun.sleep(100);
  }
  throw new Error(`${url} never became healthy`);
}

type Figures = {
  agg: number;
  decode: number;
  ttft50: number;
  ttft95: number;
  /** CPU the server's process took per generated token (µs; all its threads, spinning included). */
  cpuPerToken: number;
  /** Ours only: CPU of the JavaScript thread per generated token (µs). */
  jsPerToken: number;
  byKind: Partial<Record<Kind, { decode: number; tokens: number; ttft: number }>>;
};

/** CPU time (ms) of a process, all threads (utime + stime: 10 ms ticks), or of one thread from its schedstat (ns). */
function cpuMs(pid: number, thread = false): number {
  try {
    if (thread) return Number(readFileSync(`/proc/${pid}/task/${pid}/schedstat`, "utf8").split(" ")[0]) / 1e6;
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(f[11]) + Number(f[12])) * 10;
  } catch {
    return NaN; // not Linux, or the process is gone
  }
}

/** `k` concurrent streams against one server, in round `r`. */
async function measure(side: Side, url: string, pid: number, k: number, r: number, noEnd: Record<string, number>, seq: { n: number }): Promise<Figures> {
  const cpu0 = cpuMs(pid), js0 = cpuMs(pid, true);
  const all = await Promise.all(Array.from({ length: k }, (_, i) => stream(side, url, "bench", seq.n++, noEnd, kindOf(i, r))));
  // BENCH_TRACE=1: each stream's timeline (ms from the first request's start), to see which
  // streams' decode windows hold other streams' prefill
  if (process.env.BENCH_TRACE === "1") {
    const t0 = Math.min(...all.map((s) => s.startMs));
    const at = (ms: number) => (ms - t0).toFixed(0);
    console.log(`${side}, ${k} streams, round ${r} (kind: sent, first, last ms; decode tok/s):`, all.map((s) => `${s.kind} ${at(s.startMs)}, ${at(s.firstMs)}, ${at(s.startMs + s.wallMs)}; ${s.decodeTps.toFixed(0)}`).join(" | "));
  }
  const loose = all.find((s) => !constrained(s));
  if (loose) throw new Error(`a ${loose.kind} stream's output shows no constraint: ${JSON.stringify(loose.text.slice(0, 80))}`);
  const tokens = all.reduce((a, s) => a + s.tokens, 0);
  const cpuPerToken = ((cpuMs(pid) - cpu0) * 1000) / tokens;
  const jsPerToken = side === "ours" ? ((cpuMs(pid, true) - js0) * 1000) / tokens : NaN;
  const agg = tokens / (Math.max(...all.map((s) => s.wallMs)) / 1000);
  const byKind: Figures["byKind"] = {};
  for (const kind of ["plain", "json", "tool"] as const) {
    const of = all.filter((s) => s.kind === kind);
    if (of.length) byKind[kind] = { decode: median(of.map((s) => (kind === "tool" ? s.deltaTps : s.decodeTps))), tokens: median(of.map((s) => s.tokens)), ttft: median(of.map((s) => s.ttftMs)) };
  }
  return { agg, cpuPerToken, jsPerToken, decode: medianOf(all.map((s) => s.decodeTps)), ttft50: median(all.map((s) => s.ttftMs)), ttft95: pct(all.map((s) => s.ttftMs), 0.95), byKind };
}

/** What a run measured, for a caller that tabulates it (test/gpu/device-check.sh); medians over rounds. */
export interface VsFigures {
  device: string;
  model: string;
  rounds: number;
  /** Where each server put the layers (from our /metrics and llama-server's log); "" on the CPU. */
  placement: Record<Side, string>;
  streams: { k: number; ours: { agg: number; decode: number; ttft50: number }; theirs: { agg: number; decode: number; ttft50: number }; ratioAgg: number; ratioDecode: number }[];
}

/** Our server's placement of the model "bench", from /metrics: "cuda (NVIDIA H200), 33/33 layers". */
async function ourPlacement(url: string, key: string): Promise<string> {
  const text = await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${key}` } }).then((r) => r.text());
  const value = (name: string) => new RegExp(`^${name}\\{[^}]*model="bench"[^}]*\\} (\\S+)$`, "m").exec(text)?.[1];
  const info = /^appliance_model_device_info\{([^}]*model="bench"[^}]*)\} 1$/m.exec(text)?.[1] ?? "";
  const label = (k: string) => new RegExp(`${k}="([^"]*)"`).exec(info)?.[1];
  return `${label("device") ?? "?"}${label("gpus") ? ` (${label("gpus")})` : ""}, ${value("appliance_model_gpu_layers") ?? "?"}/${value("appliance_model_layers") ?? "?"} layers`;
}

export async function benchVsLlamaServer(): Promise<{ pass: boolean; figures?: VsFigures }> {
  const device = benchDevice();
  const onDevice = llamaServerOnDevice(device);
  const placement: Record<Side, string> = { ours: "", theirs: "" };
  const preset = process.env.BENCH_MODEL ?? "bench-64m";
  if (!isChatPresetName(preset)) throw new Error(`BENCH_MODEL: unknown chat model preset "${preset}"`);
  if (MIX !== "plain" && MIX !== "constrained") throw new Error(`BENCH_MIX: "plain" or "constrained", not "${MIX}"`);
  const modelPath = await ensureChatModel(preset);
  // BENCH_OURS_ONLY=1 measures our side alone (no llama-server build): the figures without ratios.
  const oursOnly = process.env.BENCH_OURS_ONLY === "1";
  const bin = oursOnly || BASELINE ? "" : ensureLlamaServer();
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
    writeFileSync(config, `[server]\nlog_level = "warn"\n[engines]\ndevice = "${device}"\nthreads = ${THREADS}\n[bootstrap]\ncredit_usd = 1000\n[rentals]\ndiscover = false\n` +
      `[[models]]\nid = "bench"\nname = "bench"\nkind = "chat"\nfiles = { model = "${modelPath}" }\nmax_context = ${SLOT_CONTEXT}\nslots = ${SLOTS}\nload = "start"\n`);
    // our server, from this checkout or the baseline's, on its own data folder; what it writes to
    // stderr after its banner is read on (a full pipe would stall it) and its end kept for an error
    const serve = async (root: string, data: string, side: Side) => {
      const child = Bun.spawn([process.execPath, join(root, "cli", "main.ts"), "-c", config, "-d", join(dir, data), "serve", "--port", String(++nextPort)],
        { env: { ...process.env, HOME: dir }, stdout: "ignore", stderr: "pipe" });
      children.push(child);
      const started = await untilListening(child.stderr as ReadableStream<Uint8Array>);
      void (async () => {
        for await (const chunk of child.stderr as ReadableStream<Uint8Array>) stderrTails[side] = (stderrTails[side] + new TextDecoder().decode(chunk)).slice(-4000);
      })().catch(() => {});
      return { child, started };
    };
    const ours = await serve(join(import.meta.dir, "..", ".."), "data", "ours");
    keys.ours = ours.started.key ?? "";
    const urls: Record<Side, string> = { ours: ours.started.url, theirs: "" };
    const pids: Record<Side, number> = { ours: ours.child.pid, theirs: 0 };
    if (BASELINE) {
      const base = await serve(BASELINE, "baseline-data", "theirs");
      keys.theirs = base.started.key ?? "";
      urls.theirs = base.started.url;
      pids.theirs = base.child.pid;
    } else if (!oursOnly) {
      const port = ++nextPort;
      if (onDevice.env) placement.theirs = `${llamaServerDevices(bin, onDevice.env).join(", ")}, -ngl 999`;
      // the same SLOTS × SLOT_CONTEXT tokens of context as ours
      const server = Bun.spawn([bin, "-m", modelPath, "-t", String(THREADS), "-np", String(SLOTS), "-c", String(SLOTS * SLOT_CONTEXT), "--port", String(port), "--host", "127.0.0.1", "--no-webui", "--jinja", ...onDevice.args, ...EXTRA_ARGS], {
        stdout: "ignore",
        stderr: Bun.file(log),
        env: onDevice.env,
      });
      children.push(server);
      pids.theirs = server.pid;
      urls.theirs = `http://127.0.0.1:${port}`;
      await waitHealthy(urls.theirs);
    }
    const sides = oursOnly ? (["ours"] as const) : (["theirs", "ours"] as const);
    // warm-up, once for each kind of stream (a grammar's first use included)
    const warmKinds: Kind[] = MIX === "constrained" ? ["plain", "json", "tool"] : ["plain"];
    for (const side of sides) for (const kind of warmKinds) await stream(side, urls[side], "bench", seq.n++, noEnd, kind);
    if (device !== "cpu") {
      placement.ours = await ourPlacement(urls.ours, keys.ours).catch((e: Error) => `unknown (${e.message})`);
      console.log(`device ${device}: ours ${placement.ours}${placement.theirs ? `; llama-server ${placement.theirs}` : ""}`);
    }
    for (let r = 0; r < rounds; r++)
      for (const k of STREAMS)
        for (const side of r % 2 === 0 ? sides : [...sides].reverse()) {
          // the other server's idle workers stop spinning first (llama-server's poll at 50 spins for
          // ~0.1-0.3 s after its last step): measured back to back, the second one ran on a core less
          await Bun.sleep(SETTLE_MS);
          const figures = await measure(side, urls[side], pids[side], k, r, noEnd, seq).catch(async (e: Error) => {
            const tail = side === "theirs" && !BASELINE ? (await Bun.file(log).text().catch(() => "")).split("\n").slice(-15).join("\n") : stderrTails[side];
            throw new Error(`${side}: ${e.message}${tail ? `\n${side === "ours" ? "our server" : THEIRS}'s stderr (last lines):\n${tail}` : ""}`);
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
  const med = (side: "ours" | "theirs", k: number, f: Exclude<keyof Figures, "byKind">) => medianOf(results[side][k]!.map((x) => x[f]));
  const row = (side: "ours" | "theirs", k: number) =>
    `${med(side, k, "agg").toFixed(0)} (${med(side, k, "decode").toFixed(0)}, ${med(side, k, "ttft50").toFixed(0)}/${med(side, k, "ttft95").toFixed(0)})`;
  // decode tok/s (a tool call's: deltas/s), tokens generated and time to first token (a tool call's: to
  // its first arguments) by kind of stream (constrained mix):
  // medians over the rounds that had that kind
  const kinds = (side: "ours" | "theirs", k: number) =>
    (["plain", "json", "tool"] as const)
      .map((kind) => [kind, results[side][k]!.flatMap((x) => x.byKind[kind] ?? [])] as const)
      .filter(([, xs]) => xs.length)
      .map(([kind, xs]) => `${kind} ${median(xs.map((x) => x.decode)).toFixed(0)} (${median(xs.map((x) => x.tokens))} tokens, ttft ${median(xs.map((x) => x.ttft)).toFixed(0)} ms)`)
      .join(", ");
  const what = `model ${preset}${device === "cpu" ? "" : ` on ${device}`}${SLOTS === 8 ? "" : `, ${SLOTS} slots`}, ${MIX === "constrained" ? "every other stream constrained (json_schema / tool call)" : "plain streams"}, prompt ~${promptTokens} tokens, ${MAX_TOKENS} generated, ${THREADS} threads`;
  if (oursOnly) {
    console.log(`${what}, ${rounds} rounds (medians), ours only`);
    for (const k of STREAMS)
      console.log(`${k} streams: ${row("ours", k)} — aggregate tok/s (decode tok/s, ttft p50/p95 ms); CPU per token ${med("ours", k, "cpuPerToken").toFixed(0)} µs, JavaScript ${med("ours", k, "jsPerToken").toFixed(0)} µs`);
    if (MIX === "constrained") for (const k of STREAMS) console.log(`  ${k} stream(s), decode tok/s by kind (tool: deltas/s): ${kinds("ours", k)}`);
    return { pass: false };
  }
  console.log(`${what}, ${rounds} paired rounds (medians)`);
  console.log(`streams | ${THEIRS} agg tok/s (decode, ttft p50/p95 ms) | ours agg tok/s (decode, ttft p50/p95 ms) | ratio agg | ratio decode | ratio ttft p50 (medians of paired)`);
  const paired = (k: number, f: "agg" | "decode" | "ttft50") => medianOf(results.ours[k]!.map((o, i) => o[f] / results.theirs[k]![i]![f]));
  const ratios = STREAMS.map((k) => paired(k, "agg"));
  STREAMS.forEach((k, i) => console.log(`${k} | ${row("theirs", k)} | ${row("ours", k)} | ${ratios[i]!.toFixed(2)}× | ${paired(k, "decode").toFixed(2)}× | ${paired(k, "ttft50").toFixed(2)}×`));
  for (const k of STREAMS)
    console.log(`  ${k} stream(s), aggregate tok/s per round, ${THEIRS}/ours: ${results.theirs[k]!.map((t, i) => `${t.agg.toFixed(0)}/${results.ours[k]![i]!.agg.toFixed(0)}`).join(", ")}`);
  if (MIX === "constrained")
    for (const k of STREAMS) console.log(`  ${k} stream(s), decode tok/s by kind (tool: deltas/s), ${THEIRS}: ${kinds("theirs", k)}; ours: ${kinds("ours", k)}`);
  for (const k of STREAMS)
    console.log(`  ${k} stream(s), CPU per generated token (µs, whole process, spinning workers included): ${THEIRS} ${med("theirs", k, "cpuPerToken").toFixed(0)}, ours ${med("ours", k, "cpuPerToken").toFixed(0)} (of which our JavaScript thread ${med("ours", k, "jsPerToken").toFixed(0)})`);
  // issue 29: per-stream decode and aggregate both ≥ 1.0× llama-server's at every stream count
  const decodeRatios = STREAMS.map((k) => paired(k, "decode"));
  const short = STREAMS.flatMap((k, i) => [...(ratios[i]! < 1 ? [`${k}: aggregate ${ratios[i]!.toFixed(3)}×`] : []), ...(decodeRatios[i]! < 1 ? [`${k}: decode ${decodeRatios[i]!.toFixed(3)}×`] : [])]);
  const pass = short.length === 0;
  console.log(`targets${BASELINE ? ` (against ${THEIRS}, not llama-server)` : ""}: decode per stream and aggregate ≥ 1.0× at every stream count: ${pass ? "PASS" : `FAIL (${short.join(", ")})`}`);
  const side = (s: Side, k: number) => ({ agg: med(s, k, "agg"), decode: med(s, k, "decode"), ttft50: med(s, k, "ttft50") });
  const figures: VsFigures = {
    device, model: preset, rounds, placement,
    streams: STREAMS.map((k, i) => ({ k, ours: side("ours", k), theirs: side("theirs", k), ratioAgg: ratios[i]!, ratioDecode: decodeRatios[i]! })),
  };
  return { pass, figures };
}
