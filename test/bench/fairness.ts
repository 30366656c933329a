import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ensureChatModel } from "../../models/cache";
import { isChatPresetName } from "../../models/presets";
import { SPECIAL_TOKENS } from "../../models/gguf/bpe";
import { tempDir } from "../helpers/app";
import { untilListening } from "../helpers/cli";
import { benchDevice, llamaServerDevices, llamaServerOnDevice } from "./chat-setup";
import { ensureLlamaServer } from "./llama-server-build";
import { readSseEvents } from "./sse-client";
import { waitHealthy } from "./vs-llama-server";
import { median, pct } from "./stats";

// Benchmark (issue 46, decode never stalls): what a long prompt does to a stream already generating.
// Stream A generates; once its pace is steady, B arrives with a prompt of N tokens. Measured on our
// server and on llama-server side by side (same GGUF, same threads, the same slots: `-np`), in rounds
// alternating which goes first:
//   - A's gap between tokens alone (the median before B), and while B's prompt is read (from B's
//     send to its first token): median, p95 and max, each also as a multiple of A's gap alone;
//   - B's time to first token, and the same prompt size's time to first token with no A (alone);
//   - aggregate tok/s over B's life (A's tokens and B's).
// Targets (issue 46), on bench-1ms and bench-64m: A's p95 gap ≤ 3× alone and max ≤ 6×; B's time to
// first token ≤ 1.3× alone; both better than llama-server's; aggregate tok/s not below it.
//   BENCH_MODELS=bench-1ms,bench-64m  BENCH_SLOTS=2,8  BENCH_PROMPTS=1000,2000,window  BENCH_ROUNDS=3
//   BENCH_DEVICE=cuda|vulkan (cpu by default): the model's layers on that GPU on both sides, as in
//   vs-llama-server (chat-setup.ts)
// "window": as long as a slot's context holds with B's answer (the models' trained 4096).

const MODELS = (process.env.BENCH_MODELS ?? "bench-1ms,bench-64m").split(",");
const SLOTS = (process.env.BENCH_SLOTS ?? "2,8").split(",").map(Number);
const PROMPTS = (process.env.BENCH_PROMPTS ?? "1000,2000,window").split(",");
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const THREADS = Number(process.env.BENCH_THREADS ?? 2);
const CONTEXT = 4096;
const B_TOKENS = 16;
/** A's tokens before B is sent: the first ones settle, the next measure A's gap alone. */
const A_SETTLE = 20;
const A_ALONE = 60;
const SETTLE_MS = 1000;

type Side = "ours" | "theirs";

interface Round {
  aloneGap: number;
  p50: number;
  p95: number;
  max: number;
  ttft: number;
  ttftAlone: number;
  agg: number;
}

/** A chat stream; `onToken(at)` for each generated piece (pieces of one network chunk share its time). */
async function chat(url: string, key: string, content: string, maxTokens: number, noEnd: Record<string, number>, signal: AbortSignal, onToken: (at: number) => void): Promise<void> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    signal,
    keepalive: false,
    method: "POST",
    headers: { authorization: `Bearer ${key || "none"}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "bench", stream: true, max_tokens: maxTokens, temperature: 0, logit_bias: noEnd, chat_template_kwargs: { enable_thinking: false }, messages: [{ role: "user", content }] }),
  });
  if (res.status !== 200) throw new Error(`${url}: ${res.status} ${await res.text()}`);
  await readSseEvents(res, (c, at) => {
    if (c.choices?.[0]?.delta?.content) onToken(at);
  }).catch((e: Error) => {
    if (!signal.aborted) throw e;
  });
}

/** One measurement: A generating, B's prompt of `prompt` text arriving; then B alone with another prompt of the same size. */
async function measure(url: string, key: string, prompt: (salt: string) => string, noEnd: Record<string, number>, salt: string): Promise<Round> {
  const aTimes: number[] = [];
  const stopA = new AbortController();
  let ready: () => void = () => {};
  const settled = new Promise<void>((r) => (ready = r));
  const a = chat(url, key, `Stream ${salt}. Write a very long story about a lighthouse keeper.`, CONTEXT - 64, noEnd, stopA.signal, (at) => {
    aTimes.push(at);
    if (aTimes.length === A_SETTLE + A_ALONE) ready();
  });
  await Promise.race([settled, a.then(() => Promise.reject(new Error("stream A ended before B was sent")))]);
  const bSent = performance.now();
  const bTimes: number[] = [];
  await chat(url, key, prompt(`B ${salt}`), B_TOKENS, noEnd, AbortSignal.timeout(120_000), (at) => bTimes.push(at));
  const bEnd = performance.now();
  stopA.abort();
  await a;
  if (!bTimes.length) throw new Error("B generated nothing");
  const bFirst = bTimes[0]!;
  // A's gaps that overlap the time B's prompt was read (B's send to its first token), the one that
  // spans it whole included: a server that stalls A for all of B's prompt shows that stall
  const gaps = (from: number, to: number) => aTimes.flatMap((t, i) => (i > 0 && t > from && aTimes[i - 1]! < to ? [t - aTimes[i - 1]!] : []));
  const alone = aTimes.slice(A_SETTLE, A_SETTLE + A_ALONE).flatMap((t, i, xs) => (i > 0 ? [t - xs[i - 1]!] : []));
  const during = gaps(bSent, bFirst);
  // no A token after it (A was cut first): the gap open at B's first token counts as far as it went
  if (!aTimes.some((t) => t > bFirst)) during.push(bFirst - (aTimes.filter((t) => t <= bFirst).at(-1) ?? bSent));
  const inB = aTimes.filter((t) => t > bSent && t <= bEnd).length + bTimes.length;
  const t0 = performance.now();
  let first = 0;
  await chat(url, key, prompt(`alone ${salt}`), 1, noEnd, AbortSignal.timeout(120_000), (at) => (first ||= at));
  return {
    aloneGap: median(alone),
    p50: median(during),
    p95: pct(during, 0.95),
    max: Math.max(...during),
    ttft: bFirst - bSent,
    ttftAlone: first - t0,
    agg: inB / ((bEnd - bSent) / 1000),
  };
}

/** One case's medians, for a caller that tabulates them (test/gpu/device-check.sh). */
export interface FairnessCase {
  device: string;
  model: string;
  slots: number;
  promptTokens: number;
  pass: boolean;
  ours: Record<keyof Round, number>;
  theirs: Record<keyof Round, number>;
}

export async function benchFairness(): Promise<{ pass: boolean; cases: FairnessCase[] }> {
  const device = benchDevice();
  const onDevice = llamaServerOnDevice(device);
  const cases: FairnessCase[] = [];
  const bin = ensureLlamaServer();
  if (onDevice.env) console.log(`llama-server's devices: ${llamaServerDevices(bin, onDevice.env).join(", ")}`);
  const { getLlama } = await import("node-llama-cpp");
  const llama = await getLlama({ build: "never", gpu: false });
  let pass = true;
  let port = 18700;
  console.log(`A generating, B's prompt arriving; ours vs llama-server (same GGUF${device === "cpu" ? "" : `, layers on ${device}`}, ${THREADS} threads, ${CONTEXT} tokens a slot), ${ROUNDS} rounds alternating; medians over rounds. Gaps in ms and × A's gap alone.`);
  for (const preset of MODELS) {
    if (!isChatPresetName(preset)) throw new Error(`BENCH_MODELS: unknown chat model preset "${preset}"`);
    const modelPath = await ensureChatModel(preset);
    const m = await llama.loadModel({ modelPath });
    const noEnd = Object.fromEntries(SPECIAL_TOKENS.flatMap((t) => m.tokenize(t, true)).map((t) => [String(t), -100]));
    const sentence = "The river carried the grey boats past the old mill, and the keeper counted them one by one before the evening bell. ";
    const perSentence = m.tokenize(sentence).length;
    await m.dispose();
    /** A user message of about `n` tokens, different for each salt (no slot holds its start). */
    const promptOf = (n: number) => (salt: string) => `${salt}: ${sentence.repeat(Math.max(1, Math.floor((n - 24) / perSentence)))}`;
    for (const slots of SLOTS) {
      const dir = tempDir("appliance-fair-");
      const children: Bun.Subprocess[] = [];
      try {
        const config = join(dir, "config.toml");
        writeFileSync(config, `[server]\nlog_level = "warn"\n[engines]\ndevice = "${device}"\nthreads = ${THREADS}\n[bootstrap]\ncredit_usd = 1000\n[rentals]\ndiscover = false\n` +
          `[[models]]\nid = "bench"\nname = "bench"\nkind = "chat"\nfiles = { model = "${modelPath}" }\nmax_context = ${CONTEXT}\nslots = ${slots}\nload = "start"\n`);
        const ours = Bun.spawn([process.execPath, join(import.meta.dir, "..", "..", "cli", "main.ts"), "-c", config, "-d", join(dir, "data"), "serve", "--port", String(++port)], { env: { ...process.env, HOME: dir }, stdout: "ignore", stderr: "pipe" });
        children.push(ours);
        const started = await untilListening(ours.stderr as ReadableStream<Uint8Array>);
        void (async () => {
          for await (const _ of ours.stderr as ReadableStream<Uint8Array>);
        })().catch(() => {});
        const theirsPort = ++port;
        const theirs = Bun.spawn([bin, "-m", modelPath, "-t", String(THREADS), "-np", String(slots), "-c", String(slots * CONTEXT), "--port", String(theirsPort), "--host", "127.0.0.1", "--no-webui", "--jinja", ...onDevice.args], { stdout: "ignore", stderr: "ignore", env: onDevice.env });
        children.push(theirs);
        const urls: Record<Side, string> = { ours: started.url, theirs: `http://127.0.0.1:${theirsPort}` };
        const keys: Record<Side, string> = { ours: started.key ?? "", theirs: "" };
        await waitHealthy(urls.theirs);
        for (const side of ["ours", "theirs"] as const) await chat(urls[side], keys[side], "warm up", 8, noEnd, AbortSignal.timeout(60_000), () => {});
        for (const size of PROMPTS) {
          const n = size === "window" ? CONTEXT - B_TOKENS - 64 : Number(size);
          const results: Record<Side, Round[]> = { ours: [], theirs: [] };
          for (let r = 0; r < ROUNDS; r++)
            for (const side of r % 2 ? (["theirs", "ours"] as const) : (["ours", "theirs"] as const)) {
              await Bun.sleep(SETTLE_MS);
              results[side].push(await measure(urls[side], keys[side], promptOf(n), noEnd, `${preset} ${slots} ${size} ${r} ${side}`));
            }
          const med = (side: Side, f: keyof Round) => median(results[side].map((x) => x[f]));
          const line = (side: Side) => {
            const g = med(side, "aloneGap");
            return `${side === "ours" ? "ours" : "llama-server"}: A alone ${g.toFixed(2)} ms; during B's prompt p50 ${med(side, "p50").toFixed(1)} / p95 ${med(side, "p95").toFixed(0)} (${(med(side, "p95") / g).toFixed(0)}×) / max ${med(side, "max").toFixed(0)} ms (${(med(side, "max") / g).toFixed(0)}×); B's first token ${med(side, "ttft").toFixed(0)} ms (${(med(side, "ttft") / med(side, "ttftAlone")).toFixed(2)}× alone ${med(side, "ttftAlone").toFixed(0)}); aggregate ${med(side, "agg").toFixed(0)} tok/s`;
          };
          const g = med("ours", "aloneGap");
          const ok = med("ours", "p95") <= 3 * g && med("ours", "max") <= 6 * g && med("ours", "ttft") <= 1.3 * med("ours", "ttftAlone") && med("ours", "p95") < med("theirs", "p95") && med("ours", "max") < med("theirs", "max") && med("ours", "ttft") < med("theirs", "ttft") && med("ours", "agg") >= med("theirs", "agg");
          if (!ok) pass = false;
          const all = (side: Side) => Object.fromEntries((Object.keys(results[side][0]!) as (keyof Round)[]).map((f) => [f, med(side, f)])) as Record<keyof Round, number>;
          cases.push({ device, model: preset, slots, promptTokens: n, pass: ok, ours: all("ours"), theirs: all("theirs") });
          console.log(`${preset}, ${slots} slots, B's prompt ${n} tokens: ${ok ? "PASS" : "FAIL"}\n  ${line("ours")}\n  ${line("theirs")}`);
        }
      } finally {
        for (const c of children) {
          c.kill("SIGTERM");
          if ((await Promise.race([c.exited, Bun.sleep(5000).then(() => "slow")])) === "slow") c.kill("SIGKILL");
        }
        rmSync(dir, { recursive: true, force: true });
      }
    }
  }
  return { pass, cases };
}
