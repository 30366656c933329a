// Benchmark (issue "chat engine"): streaming /v1/chat/completions over real HTTP against the bare
// node-llama-cpp call (LlamaChat.generateResponse on a context of the same shape), same model,
// same process, same run. Targets: one stream's decode tokens/s ≥ 0.95× bare; time to first
// token overhead ≤ 5 ms; 4 concurrent streams ≥ 1.8× the total tokens/s of one.
// The two sides alternate round by round and the medians of per-round ratios and differences are
// reported: on a shared 2-core box the CPU's speed drifts by tens of percent within a minute.
import { LlamaChat, QwenChatWrapper, type LlamaContextSequence } from "node-llama-cpp";
import { ensureChatModel } from "../../models/cache";
import { validateConfig } from "../../src/lib/config";
import { llamaRuntime } from "../../src/3-engines/llama/runtime";
import { createLogger } from "../../src/lib/log";
import { startServer } from "../../src/main";
import { tempDir } from "../helpers/app";
import { BENCH } from "./chat-setup";
import { readSseEvents } from "./sse-client";
import { median } from "./stats";

/**
 * Both sides are timed the same way: from the first to the last piece of visible text, counting
 * tokens (onToken; the usage chunk) rather than text pieces, which may hold several tokens.
 */
interface Stream {
  ttftMs: number;
  decodeTps: number;
  tokens: number;
  wallMs: number;
}

async function bareStream(sequence: LlamaContextSequence, prompt: string): Promise<Stream> {
  const chat = new LlamaChat({ contextSequence: sequence, chatWrapper: new QwenChatWrapper({ thoughts: "discourage" }) });
  const t0 = performance.now();
  let first = 0;
  let last = 0;
  let tokens = 0;
  await chat.generateResponse([{ type: "user", text: prompt }], {
    maxTokens: BENCH.maxTokens,
    temperature: 0,
    repeatPenalty: false,
    // Timed like the HTTP side: first and last visible text; counted in tokens.
    onToken: (t) => {
      tokens += t.length;
    },
    onTextChunk: (text) => {
      if (!text) return;
      const now = performance.now();
      if (!first) first = now;
      last = now;
    },
  });
  chat.dispose({ disposeSequence: false });
  return { ttftMs: first - t0, decodeTps: (tokens - 1) / ((last - first) / 1000), tokens, wallMs: last - t0 };
}

export async function httpStream(url: string, key: string, prompt: string): Promise<Stream> {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "bench", stream: true, max_tokens: BENCH.maxTokens, temperature: 0, chat_template_kwargs: { enable_thinking: false }, messages: [{ role: "user", content: prompt }] }),
  });
  if (res.status !== 200) throw new Error(`status ${res.status}: ${await res.text()}`);
  let first = 0;
  let last = 0;
  let tokens = 0;
  await readSseEvents(res, (c, now) => {
    if (c.usage) tokens = c.usage.completion_tokens;
    else if (c.choices?.[0]?.delta?.content) {
      if (!first) first = now;
      last = now;
    }
  });
  return { ttftMs: first - t0, decodeTps: (tokens - 1) / ((last - first) / 1000), tokens, wallMs: last - t0 };
}

/** Aggregate tokens/s of a round: all tokens over the time until the last stream finished. */
const total = (round: Stream[]) => round.reduce((n, s) => n + s.tokens, 0) / (Math.max(...round.map((s) => s.wallMs)) / 1000);

export async function benchChat() {
  const modelPath = await ensureChatModel(BENCH.preset);
  const logger = createLogger({ level: "warn" });
  const config = validateConfig({
    server: { data_dir: tempDir("appliance-bench-"), port: 0, log_level: "warn" },
    engines: { device: "cpu", threads: BENCH.threads },
    bootstrap: { credit_usd: 1000 },
    models: [{ id: "bench", name: "bench", kind: "chat", files: { model: modelPath }, max_context: BENCH.contextSize, slots: BENCH.slots, load: "start" }],
  });
  let key = "";
  const server = await startServer(config, { logger, banner: (l) => (key ||= /sk-apl-[0-9A-Za-z]{44}/.exec(l)?.[0] ?? "") });
  // The bare side: the same runtime and model file, its own context of the same shape.
  const { llama } = await llamaRuntime({ device: "cpu", threads: BENCH.threads, logger });
  const model = await llama.loadModel({ modelPath });
  const context = await model.createContext({ contextSize: BENCH.contextSize, sequences: BENCH.slots, threads: BENCH.threads });
  const sequences = Array.from({ length: BENCH.slots }, () => context.getSequence());
  const bare = (n: number, base: number) => Promise.all(Array.from({ length: n }, (_, i) => bareStream(sequences[i]!, BENCH.prompt(base + i))));
  const http = (n: number, base: number) => Promise.all(Array.from({ length: n }, (_, i) => httpStream(server.url, key, BENCH.prompt(base + i))));
  const r = { bare1: [] as Stream[], http1: [] as Stream[], bare4: [] as Stream[][], http4: [] as Stream[][] };
  try {
    await bare(1, 90_000); // warm-up both sides
    await http(1, 90_100);
    for (let i = 0; i < BENCH.rounds; i++) {
      const base = 1000 * (i + 1);
      const sides = [
        async () => r.bare1.push((await bare(1, base))[0]!),
        async () => r.http1.push((await http(1, base + 100))[0]!),
        async () => r.bare4.push(await bare(4, base + 200)),
        async () => r.http4.push(await http(4, base + 300)),
      ];
      for (const side of i % 2 ? sides.reverse() : sides) await side();
    }
  } finally {
    await context.dispose();
    await model.dispose();
    await server.stop();
  }
  const decodeRatio = median(r.http1.map((s, i) => s.decodeTps / r.bare1[i]!.decodeTps));
  const ttftDelta = median(r.http1.map((s, i) => s.ttftMs - r.bare1[i]!.ttftMs));
  const scaleHttp = median(r.http4.map((round, i) => total(round) / total([r.http1[i]!])));
  const scaleBare = median(r.bare4.map((round, i) => total(round) / total([r.bare1[i]!])));
  console.log(`chat streaming, ${BENCH.preset}, ${BENCH.threads} threads, ${BENCH.slots} slots, ${BENCH.maxTokens} tokens per stream; ${BENCH.rounds} alternating rounds (medians)`);
  console.log(`                     decode tok/s   ttft ms   total tok/s, 1 stream   total tok/s, 4 streams`);
  const row = (name: string, one: Stream[], four: Stream[][]) =>
    `${name.padEnd(21)}${median(one.map((s) => s.decodeTps)).toFixed(1).padStart(12)}${median(one.map((s) => s.ttftMs)).toFixed(1).padStart(10)}` +
    `${median(one.map((s) => total([s]))).toFixed(1).padStart(24)}${median(four.map(total)).toFixed(1).padStart(25)}`;
  console.log(row("bare node-llama-cpp", r.bare1, r.bare4));
  console.log(row("appliance over HTTP", r.http1, r.http4));
  console.log(`decode ratio ${decodeRatio.toFixed(3)} (target ≥ 0.95) ${decodeRatio >= 0.95 ? "PASS" : "FAIL"}`);
  console.log(`ttft overhead ${ttftDelta.toFixed(1)} ms (target ≤ 5 ms) ${ttftDelta <= 5 ? "PASS" : "FAIL"}`);
  console.log(`4 streams / 1 stream over HTTP ${scaleHttp.toFixed(2)}× (target ≥ 1.8×) ${scaleHttp >= 1.8 ? "PASS" : "FAIL"}; bare engine: ${scaleBare.toFixed(2)}×`);
  return { pass: decodeRatio >= 0.95 && ttftDelta <= 5 && scaleHttp >= 1.8 };
}
