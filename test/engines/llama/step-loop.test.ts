import { afterAll, beforeAll, expect, test } from "bun:test";
import type { LlamaContext, LlamaModel } from "node-llama-cpp";
import { ensureChatModel } from "../../../models/cache";
import type { ChatJob, EngineEvent } from "../../../src/chat/job";
import { LlamaChatEngine } from "../../../src/engines/llama/chat-engine";
import { llamaRuntime } from "../../../src/engines/llama/runtime";
import { createLogger } from "../../../src/log";
import { forceText } from "../../models/force";
import { THREADS } from "../../models/llama";
import { userJob } from "../../helpers/chat-job";

// The step loop (step-loop.ts) on the real engine and the tiny generated chat model: several
// requests on one context decode in shared steps, say what each says alone, and leave the slots'
// caches right for the requests after them, beside requests through LlamaChat too.

const MARK = /«force:([\s\S]*?)»/;
const logger = createLogger({ level: "error" });
const runtime = () => llamaRuntime({ device: "cpu", threads: THREADS, logger });

function engine(slots: number, stepLoop = true) {
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
    stepLoop,
    testTokenBias: (model: LlamaModel, job: ChatJob) => {
      const m = MARK.exec(job.turns.findLast((t) => t.role === "user")!.text);
      return m ? forceText(model, m[1]!) : undefined;
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
  reference = engine(1, false);
});
afterAll(async () => {
  for (const e of [four, one, reference]) await e.unload();
});

const job = (text: string, o: Partial<ChatJob> = {}) => userJob(text, { maxTokens: 16, ...o });

async function run(e: LlamaChatEngine, j: ChatJob, signal = new AbortController().signal, onEvent?: (e: EngineEvent) => void) {
  const prepared = await e.prepare(j);
  const lease = await prepared.acquire();
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

/** Counts the llama.cpp decode calls on `e`'s context while `f` runs. */
async function countDecodes<T>(e: LlamaChatEngine, f: () => Promise<T>): Promise<{ value: T; decodes: number }> {
  await e.load();
  const addon = (e as unknown as { state: { context: LlamaContext } }).state.context as unknown as { _ctx: { decodeBatch(): Promise<void> } };
  const native = addon._ctx;
  const original = native.decodeBatch;
  let decodes = 0;
  // the addon's method is read-only on its prototype: an own property shadows it
  Object.defineProperty(native, "decodeBatch", {
    configurable: true,
    value(this: unknown) {
      decodes++;
      return original.call(this);
    },
  });
  try {
    return { value: await f(), decodes };
  } finally {
    delete (native as { decodeBatch?: unknown }).decodeBatch;
  }
}

const topics = ["bridges", "rivers", "tunnels", "harbours"];
const said = (r: Awaited<ReturnType<typeof run>>) => ({ text: r.text, finishReason: r.finishReason, completionTokens: r.completionTokens });

test("four requests at once decode in shared steps, and each says what it says alone", async () => {
  const jobs = topics.map((t) => job(`Tell me about ${t}.`));
  const alone = [];
  for (const j of jobs) alone.push(said(await run(reference, j)));
  const { value: together, decodes } = await countDecodes(four, () => Promise.all(jobs.map((j) => run(four, j))));
  expect(together.map(said)).toEqual(alone);
  expect(alone.every((a) => a.completionTokens === 16)).toBe(true);
  // one decode per step: 16 tokens each, the prompts in the first step (or a few, as they arrive);
  // one request after another would be 4 × 16
  expect(decodes).toBeGreaterThanOrEqual(16);
  expect(decodes).toBeLessThanOrEqual(16 + 3);
});

test("a request that took a slot is waited for, briefly: its prompt joins the next step", async () => {
  const [a, b] = await Promise.all(["bridges", "rivers"].map((t) => four.prepare(job(`Tell me about ${t} again.`))));
  const { value, decodes } = await countDecodes(four, async () => {
    const [leaseA, leaseB] = await Promise.all([a!.acquire(), b!.acquire()]);
    const signal = new AbortController().signal;
    const runA = leaseA.run(() => {}, signal).finally(() => leaseA.release());
    // B starts a moment later, as a request does that is still being set up
    await Bun.sleep(5);
    const runB = leaseB.run(() => {}, signal).finally(() => leaseB.release());
    return Promise.all([runA, runB]);
  });
  expect(value.map((r) => r.completionTokens)).toEqual([16, 16]);
  // both prompts in the first step, then 15 steps: B's prompt alone after A's would make 17
  expect(decodes).toBe(16);
});

test("beside live traffic, batch requests decode one per step, taking turns", async () => {
  const live = await (await four.prepare(job("A live request that holds its slot."))).acquire();
  try {
    const order: string[] = [];
    const batch = async (label: string) => {
      const lease = await (await four.prepare(job(`Tell me about ${label}.`, { maxTokens: 8 }))).acquire(undefined, { batch: true });
      try {
        return await lease.run((e) => {
          if (e.type === "text") order.push(label);
        }, new AbortController().signal);
      } finally {
        lease.release();
      }
    };
    const { value, decodes } = await countDecodes(four, () => Promise.all([batch("kites"), batch("sails")]));
    expect(value.map((r) => r.completionTokens)).toEqual([8, 8]);
    // one at a time: 2 × 8 steps; in turns: the second does not wait for the first to finish
    expect(decodes).toBe(16);
    expect(order.indexOf("sails")).toBeLessThan(order.lastIndexOf("kites"));
  } finally {
    live.release();
  }
});

test("a stop string: the token decoded ahead stays in the slot's cache, and the requests after it use the slot as they should", async () => {
  const stopped = job(`Go. «force:one two STOP three four five»`, { stop: ["STOP"], maxTokens: 12 });
  const first = await run(one, stopped);
  expect(first).toMatchObject({ text: "one two ", finishReason: "stop" });
  // the same prompt again: found in the cache, the same answer
  const again = await run(one, stopped);
  expect(again).toEqual({ ...first, cachedTokens: first.promptTokens - 1 });
  // another prompt on that slot (its cache partly erased): what a fresh slot says
  const other = job("Tell me about canals.");
  expect(said(await run(one, other))).toEqual(said(await run(reference, other)));
  expect(said(await run(one, stopped))).toEqual(said(first));
});

test("a plain request beside one through LlamaChat (response_format) on the same context: both finish, each as alone", async () => {
  const plain = job("Tell me about lighthouses.", { maxTokens: 24 });
  const json = job("Describe a lighthouse as JSON.", { format: { type: "json_object" }, maxTokens: 24 });
  const alone = [said(await run(reference, plain)), said(await run(reference, json))];
  for (let i = 0; i < 2; i++) {
    const together = await Promise.all([run(four, plain), run(four, json)]);
    expect(together.map(said)).toEqual(alone);
  }
});

test("plain, LlamaChat and aborted requests together, again and again: every one ends", async () => {
  // Each path's steps take node-llama-cpp's context lock in turn and share its thread reservation;
  // this once left a step waiting for threads forever (step-loop.ts, at the lock's release), in
  // about one run of this test in four with 12 rounds.
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
