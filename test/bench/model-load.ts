// Benchmark (issue 28, models loaded on demand), one real server in this process, streaming
// /v1/chat/completions over HTTP, engine threads set (BENCH_THREADS, default 2):
// 1. Time to first token for an on-demand model (load = "first_use") that the request must load
//    first (an admin unload before it) against the same model already loaded, on the generated
//    tiny "chat" model and the ~65M "bench-64m" one. Reported, no target. The file stays in the
//    page cache between rounds: "cold" is the planner's placement, llama.cpp's model load and
//    context creation, not a disk read.
// 2. What the residency bookkeeping adds to a request whose model is already loaded (target
//    ≤ 0.5 ms). A request holds its model with registry.use(), which awaits residency.ready(), and
//    lets go with release(), which calls residency.idle(); for a loaded model nothing more runs
//    (no planner call). No server path skips residency altogether, so two baselines:
//    - per call, the measurement the target is judged on: registry.use() + release() on the loaded
//      on-demand model against the synchronous registry.engine() lookup that a request's hold was
//      before issue 28 (id → engine, no residency), alternating call by call: the median of the
//      paired differences is the whole bookkeeping (the await, ready(), idle()); the held call's
//      p99 must be within the target too. The pinned twin's hold is shown beside it.
//    - end to end: warm time to first token of the on-demand tiny model against a pinned twin
//      (same file, load = "start"), the k-th request of one model's run paired with the k-th of
//      the other's, the order alternating per round. A pinned model goes through the same
//      ready(), so this pair shows what being on demand costs a loaded model in the real server
//      (last-use stamp, keep-alive timer re-armed at each request's end). On a shared 2-core box
//      its paired differences spread over milliseconds, far wider than the target: its median is
//      printed with a 95% interval, and the target fails only if that interval lies above 0.5 ms.
//    Each model's context keeps a CPU threadpool whose idle worker polls for ~70 ms after a step
//    (src/3-engines/llama/threadpool.ts): a request to another model within that time shares the
//    cores with it, so every timed request to a model other than the last one's comes after a
//    pause (and in part 2, after one untimed request).
// Rounds interleave everything (BENCH_ROUNDS, default 12), after one warm-up round.
import { ensureChatModel } from "../../models/cache";
import { validateConfig } from "../../src/lib/config";
import { createLogger } from "../../src/lib/log";
import { startServer } from "../../src/main";
import { tempDir } from "../helpers/app";
import { BENCH } from "./chat-setup";
import { readSseEvents } from "./sse-client";

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 12);
/** Timed requests per model and round in the end-to-end pair, and calls per side per round. */
const RUN = 8;
const CALLS = 2000;
/** Longer than an idle threadpool worker polls (THREADPOOL_POLL). */
const PAUSE_MS = 150;
const TARGET_MS = 0.5;
/** Enough tokens for the first visible text; the rest of the stream is not timed. */
const MAX_TOKENS = 4;

const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
const median = (xs: number[]) => sorted(xs)[Math.floor(xs.length / 2)]!;
const p99 = (xs: number[]) => sorted(xs)[Math.min(xs.length - 1, Math.floor(xs.length * 0.99))]!;
/** A distribution-free 95% interval for the median (order statistics n/2 ± 0.98√n). */
function medianInterval(xs: number[]): [number, number] {
  const s = sorted(xs);
  const half = 0.98 * Math.sqrt(s.length);
  return [s[Math.max(0, Math.floor(s.length / 2 - half))]!, s[Math.min(s.length - 1, Math.ceil(s.length / 2 + half))]!];
}
const ms = (x: number, digits = 2) => `${x >= 0 ? "+" : ""}${x.toFixed(digits)}`;

/** Milliseconds from sending the request to the first piece of visible text arriving. */
async function ttft(url: string, key: string, model: string, prompt: string): Promise<number> {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, stream: true, max_tokens: MAX_TOKENS, temperature: 0, chat_template_kwargs: { enable_thinking: false }, messages: [{ role: "user", content: prompt }] }),
  });
  if (res.status !== 200) throw new Error(`${model}: status ${res.status}: ${await res.text()}`);
  let first = 0;
  await readSseEvents(res, (c, now) => {
    if (!first && c.choices?.[0]?.delta?.content) first = now;
  });
  if (!first) throw new Error(`${model}: no text in ${MAX_TOKENS} tokens`);
  return first - t0;
}

export async function benchModelLoad() {
  const [tiny, big] = await Promise.all([ensureChatModel("chat"), ensureChatModel("bench-64m")]);
  const chat = (id: string, file: string, load: "first_use" | "start") => ({ id, name: id, kind: "chat", files: { model: file }, max_context: 1024, slots: 2, load });
  const config = validateConfig({
    server: { data_dir: tempDir("appliance-bench-"), port: 0, log_level: "warn" },
    // keep_alive_s as shipped (300): the timer is re-armed at every request's end, as in production.
    engines: { device: "cpu", threads: BENCH.threads, keep_alive_s: 300 },
    bootstrap: { credit_usd: 1000 },
    models: [chat("tiny", tiny, "first_use"), chat("tiny-pinned", tiny, "start"), chat("bench-64m", big, "first_use")],
  });
  let key = "";
  const server = await startServer(config, { logger: createLogger({ level: "warn" }), banner: (l) => (key ||= /sk-apl-[0-9A-Za-z]{44}/.exec(l)?.[0] ?? "") });
  const registry = server.deps.registry;
  let n = 0;
  const request = (model: string) => ttft(server.url, key, model, BENCH.prompt(n++));
  const afterPause = async (model: string) => (await Bun.sleep(PAUSE_MS), request(model));
  const unload = async (id: string) => {
    // The last request's release may trail its stream's last byte: then the unload waits for it.
    if ((await registry.adminUnload(id)) === "when_idle") while (registry.status().find((s) => s.id === id)?.state !== "unloaded") await Bun.sleep(1);
  };
  /** µs of one call: a hold on a loaded model (use + release, the residency path) or the bare lookup (not awaited: it is synchronous). */
  const timed = async (fn: () => unknown): Promise<number> => {
    const t0 = Bun.nanoseconds();
    const v = fn();
    if (v instanceof Promise) await v;
    return (Bun.nanoseconds() - t0) / 1000;
  };
  const hold = (id: string) => async () => (await registry.use(id, "chat")).release();
  const holdDemand = hold("tiny");
  const holdPinned = hold("tiny-pinned");
  const lookup = () => registry.engine("tiny", "chat");

  const onDemand = ["tiny", "bench-64m"];
  const r = {
    cold: Object.fromEntries(onDemand.map((m) => [m, [] as number[]])),
    warm: Object.fromEntries(onDemand.map((m) => [m, [] as number[]])),
    demand: [] as number[],
    pinned: [] as number[],
    us: { demand: [] as number[], pinned: [] as number[], lookup: [] as number[], added: [] as number[] },
  };
  try {
    for (let i = -1; i < ROUNDS; i++) {
      const keep = i >= 0; // round -1 warms up: loads both on-demand models, JIT, the planner's first look
      for (const m of i % 2 ? [...onDemand].reverse() : onDemand) {
        const warm = await afterPause(m); // loaded by the previous round's cold request
        await unload(m);
        const cold = await afterPause(m);
        if (keep) (r.warm[m]!.push(warm), r.cold[m]!.push(cold));
      }
      for (const m of i % 2 ? ["tiny-pinned", "tiny"] : ["tiny", "tiny-pinned"]) {
        await afterPause(m);
        for (let k = 0; k < RUN; k++) {
          const t = await request(m);
          if (keep) (m === "tiny" ? r.demand : r.pinned).push(t);
        }
      }
      for (let c = 0; c < CALLS; c++) {
        // Which of the pair goes first alternates call by call.
        const bare = c % 2 ? await timed(lookup) : 0;
        const held = await timed(holdDemand);
        const lookupUs = c % 2 ? bare : await timed(lookup);
        const pinned = await timed(holdPinned);
        if (keep) (r.us.demand.push(held), r.us.lookup.push(lookupUs), r.us.pinned.push(pinned), r.us.added.push(held - lookupUs));
      }
    }
  } finally {
    await server.stop();
  }

  console.log(`models on demand: ${BENCH.threads} threads, streaming chat over HTTP, ${ROUNDS} interleaved rounds after a warm-up (medians)`);
  const columns = ["cold ttft ms", "warm ttft ms", "load share ms (cold − warm, paired)", "cold / warm"];
  console.log(["model".padEnd(12), ...columns].join("   "));
  for (const m of onDemand) {
    const [cold, warm] = [r.cold[m]!, r.warm[m]!];
    const cells = [median(cold).toFixed(1), median(warm).toFixed(2), median(cold.map((c, i) => c - warm[i]!)).toFixed(1), `${(median(cold) / median(warm)).toFixed(1)}×`];
    console.log([m.padEnd(12), ...cells.map((c, i) => c.padStart(columns[i]!.length))].join("   "));
  }

  const added = median(r.us.added);
  const tail = p99(r.us.demand);
  console.log(`\nalready loaded: what a request's hold costs, per call in µs (${r.us.added.length} calls a side, interleaved)   median      p99`);
  const row = (name: string, us: number[]) => console.log(`  ${name.padEnd(84)}${median(us).toFixed(2).padStart(9)}${p99(us).toFixed(2).padStart(9)}`);
  row("registry.use() + release(), on demand: residency ready() + idle()", r.us.demand);
  row("registry.use() + release(), pinned: the same without the keep-alive timer", r.us.pinned);
  row("registry.engine() lookup: a request's hold before issue 28 (no residency)", r.us.lookup);
  console.log(`  added by residency (on demand − lookup): median of paired differences ${ms(added)} µs, 95% interval ${medianInterval(r.us.added).map((x) => ms(x)).join(" … ")} µs`);

  const diffs = r.demand.map((d, i) => d - r.pinned[i]!);
  const e2e = median(diffs);
  const [lo, hi] = medianInterval(diffs);
  console.log(`already loaded, end to end: warm ttft of the tiny model on demand ${median(r.demand).toFixed(2)} ms, pinned ${median(r.pinned).toFixed(2)} ms (${diffs.length} pairs)`);
  console.log(`  on demand − pinned: median of paired differences ${ms(e2e, 3)} ms, 95% interval ${ms(lo, 3)} … ${ms(hi, 3)} ms`);

  const perCall = added / 1000 <= TARGET_MS && tail / 1000 <= TARGET_MS;
  const endToEnd = lo <= TARGET_MS;
  const verdict = (ok: boolean) => (ok ? "PASS" : "FAIL");
  console.log(`bookkeeping added to a loaded model's request (target ≤ ${TARGET_MS} ms):`);
  console.log(`  per call ${(added / 1000).toFixed(4)} ms (median of paired differences), held call p99 ${(tail / 1000).toFixed(4)} ms ${verdict(perCall)}`);
  console.log(`  end to end ${ms(e2e, 3)} ms (median of paired differences; ${endToEnd ? "not shown above" : "shown above"} the target: interval from ${ms(lo, 3)} ms) ${verdict(endToEnd)}`);
  return { pass: perCall && endToEnd };
}
