import { afterAll, beforeAll, expect, test } from "bun:test";
import type { LlamaModel } from "node-llama-cpp";
import { ensureChatModel } from "../../../models/cache";
import type { ChatJob, EngineEvent } from "../../../src/chat/job";
import { LlamaChatEngine } from "../../../src/engines/llama/chat-engine";
import type { DecodeLoop } from "../../../src/engines/llama/decode-loop";
import { llamaRuntime } from "../../../src/engines/llama/runtime";
import { createLogger } from "../../../src/log";
import { THREADS } from "../../models/llama";
import { userJob } from "../../helpers/chat-job";

// The decode loop (native/loop.cpp, decode-loop.ts) on the real engine and the tiny generated chat
// model: several requests on one context decode in shared steps, say what each says alone, give
// way to live traffic when they are batch work, and leave the slots' cache records right for the
// requests after them, whatever ends them (max tokens, a stop string, an abort).

const MARK = /«force:([\s\S]*?)»/;
const logger = createLogger({ level: "error" });
const runtime = () => llamaRuntime({ device: "cpu", threads: THREADS, logger });

function engine(slots: number) {
  return new LlamaChatEngine({
    modelId: "chat",
    modelPath: chatPath,
    runtime,
    contextSize: 512,
    slots,
    threads: THREADS,
    gpuLayers: 0,
    maxQueue: 8,
    maxWaitMs: 60_000,
    logger,
    testForcedTokens: (model: LlamaModel, job: ChatJob) => {
      const m = MARK.exec(job.turns.findLast((t) => t.role === "user")!.text);
      return m ? model.tokenize(m[1]!, true) : undefined;
    },
  });
}

let chatPath: string;
let four: LlamaChatEngine;
let one: LlamaChatEngine;
let reference: LlamaChatEngine;

beforeAll(async () => {
  chatPath = await ensureChatModel("chat");
  four = engine(4);
  one = engine(1);
  reference = engine(1);
});
afterAll(async () => {
  for (const e of [four, one, reference]) await e.unload();
});

const job = (text: string, o: Partial<ChatJob> = {}) => userJob(text, { maxTokens: 16, ...o });

async function run(e: LlamaChatEngine, j: ChatJob, signal = new AbortController().signal, onEvent?: (e: EngineEvent) => void, batch = false) {
  const prepared = await e.prepare(j);
  const lease = await prepared.acquire(undefined, { batch });
  let text = "";
  try {
    const result = await lease.run((ev) => {
      if (ev.type === "text") text += ev.text;
      onEvent?.(ev);
    }, signal);
    return { text, finishReason: result.finishReason, completionTokens: result.completionTokens, cachedTokens: result.cachedTokens, promptTokens: result.promptTokens };
  } finally {
    lease.release();
  }
}

const loopOf = (e: LlamaChatEngine) => (e as unknown as { state: { loop: DecodeLoop } }).state.loop;

/** The decode steps `e`'s loop ran while `f` ran. */
async function countSteps<T>(e: LlamaChatEngine, f: () => Promise<T>): Promise<{ value: T; steps: number }> {
  await e.load();
  const before = loopOf(e).stats().steps;
  const value = await f();
  return { value, steps: loopOf(e).stats().steps - before };
}

const topics = ["bridges", "rivers", "tunnels", "harbours"];
const said = (r: Awaited<ReturnType<typeof run>>) => ({ text: r.text, finishReason: r.finishReason, completionTokens: r.completionTokens });

test("four requests at once decode in shared steps, and each says what it says alone", async () => {
  const jobs = topics.map((t) => job(`Tell me about ${t}.`));
  const alone = [];
  for (const j of jobs) alone.push(said(await run(reference, j)));
  // every lease taken before any runs, so the four overlap in time whatever the machine's load
  const leases = await Promise.all(jobs.map(async (j) => (await four.prepare(j)).acquire()));
  const { value: together, steps } = await countSteps(four, () =>
    Promise.all(
      leases.map(async (l) => {
        let text = "";
        const r = await l.run((e) => e.type === "text" && (text += e.text), new AbortController().signal).finally(() => l.release());
        return { text, finishReason: r.finishReason, completionTokens: r.completionTokens, cachedTokens: r.cachedTokens, promptTokens: r.promptTokens };
      }),
    ),
  );
  expect(together.map(said)).toEqual(alone);
  expect(alone.every((a) => a.completionTokens === 16)).toBe(true);
  // one decode per step: 16 tokens each, the prompts in the first step (or a few, as they arrive);
  // one request after another would be 4 × 16
  expect(steps).toBeGreaterThanOrEqual(16);
  expect(steps).toBeLessThanOrEqual(16 + 3);
});

test("beside live traffic, batch requests decode one per step, taking turns; once it is quiet, together", async () => {
  const controller = new AbortController();
  const live = run(four, job("A live request that runs on.", { maxTokens: 400 }), controller.signal);
  const order: string[] = [];
  const batch = (label: string) => run(four, job(`Tell me about ${label}.`, { maxTokens: 8 }), undefined, (e) => e.type === "text" && order.push(label), true);
  const { value, steps } = await countSteps(four, () => Promise.all([batch("kites"), batch("sails")]));
  controller.abort();
  await live;
  expect(value.map((r) => r.completionTokens)).toEqual([8, 8]);
  // one at a time: 2 × 8 steps at least (the live request steps beside them); in turns: the
  // second does not wait for the first to finish
  expect(steps).toBeGreaterThanOrEqual(16);
  expect(order.indexOf("sails")).toBeLessThan(order.lastIndexOf("kites"));
  // once live traffic has been quiet for 2 s, together
  await Bun.sleep(2100);
  // both leases taken before either runs, so the two overlap in time whatever the machine's load
  const leases = await Promise.all(["kites", "sails"].map(async (l) => (await four.prepare(job(`Tell me about ${l}.`, { maxTokens: 8 }))).acquire(undefined, { batch: true })));
  const quiet = await countSteps(four, () => Promise.all(leases.map((l) => l.run(() => {}, new AbortController().signal).finally(() => l.release()))));
  expect(quiet.steps).toBeLessThanOrEqual(8 + 1);
});

test("a live prompt decodes alone: batch work holds its steps until the live request's first token", async () => {
  const events: string[] = [];
  const batchRun = run(four, job("Tell me about kites.", { maxTokens: 40 }), undefined, (e) => e.type === "text" && events.push("batch"), true);
  await Bun.sleep(30);
  const live = run(four, job("Tell me about sails, and then about the wind over the open sea in the evening.", { maxTokens: 4 }), undefined, (e) => e.type === "text" && events.push("live"));
  const [b, l] = await Promise.all([batchRun, live]);
  expect([b.completionTokens, l.completionTokens]).toEqual([40, 4]);
  expect(events).toContain("live");
});

test("a stop string: the token decoded ahead stays in the slot's cache, and the requests after it use the slot as they should", async () => {
  const stopped = job(`Go. «force:one two STOP three four five»`, { stop: ["STOP"], maxTokens: 12 });
  const first = await run(one, stopped);
  expect(first).toMatchObject({ text: "one two ", finishReason: "stop" });
  // the same prompt again: found in the cache, the same answer
  const again = await run(one, stopped);
  expect(again).toEqual({ ...first, cachedTokens: first.promptTokens - 1 });
  // another prompt on that slot (its cache partly dropped): what a fresh slot says
  const other = job("Tell me about canals.");
  expect(said(await run(one, other))).toEqual(said(await run(reference, other)));
  expect(said(await run(one, stopped))).toEqual(said(first));
});

test("a plain request beside one under a grammar (response_format) on the same context: both finish, each as alone", async () => {
  const plain = job("Tell me about lighthouses.", { maxTokens: 24 });
  const json = job("Describe a lighthouse as JSON.", { format: { type: "json_object" }, maxTokens: 24 });
  const alone = [said(await run(reference, plain)), said(await run(reference, json))];
  for (let i = 0; i < 2; i++) {
    const together = await Promise.all([run(four, plain), run(four, json)]);
    expect(together.map(said)).toEqual(alone);
  }
});

test("plain, grammar and aborted requests together, again and again: every one ends", async () => {
  for (let i = 0; i < 30; i++) {
    const controller = new AbortController();
    let pieces = 0;
    const results = await Promise.all([
      run(four, job(`Tell me about lighthouses ${i}.`, { maxTokens: 8 + (i % 7) * 5 })),
      run(four, job(`Describe a lighthouse as JSON ${i}.`, { format: { type: "json_object" }, maxTokens: 5 + (i % 5) * 6 })),
      run(four, job(`Tell me about ferries ${i}.`, { maxTokens: 30 }), controller.signal, (e) => {
        if (e.type === "text" && ++pieces === 1 + (i % 4)) controller.abort();
      }),
    ]);
    expect(results[0]!.completionTokens).toBeGreaterThan(0);
  }
}, 60_000);

test("a request aborted mid-stream ends at once; the one beside it runs on", async () => {
  const controller = new AbortController();
  let pieces = 0;
  const aborted = run(four, job("Tell me about ferries.", { maxTokens: 200 }), controller.signal, (e) => {
    if (e.type === "text" && ++pieces === 3) controller.abort();
  });
  const other = run(four, job("Tell me about ferries and docks.", { maxTokens: 40 }));
  const a = await aborted;
  expect(a.completionTokens).toBeLessThan(10);
  expect((await other).completionTokens).toBe(40);
});

test("unloading with a request in flight ends it with an error, and the model loads and answers again", async () => {
  const e = engine(1);
  await e.load();
  const model = (e as unknown as { state: { model: LlamaModel } }).state.model;
  // no end of turn: it runs to max_tokens unless cut
  const noEnd = new Map(["<|im_end|>", "<|endoftext|>"].map((t) => [model.tokenize(t, true)[0]!, -100]));
  let started!: () => void;
  const first = new Promise<void>((r) => (started = r));
  const running = run(e, job("Tell me about ferries.", { maxTokens: 400, sampling: { temperature: 0, logitBias: noEnd } }), undefined, () => started());
  const outcome = running.then(() => null, (err: Error) => err.message);
  await first;
  await e.unload();
  expect(await outcome).toBe("the decode loop closed");
  expect(said(await run(e, job("Tell me about canals.")))).toEqual(said(await run(reference, job("Tell me about canals."))));
  await e.unload();
});
