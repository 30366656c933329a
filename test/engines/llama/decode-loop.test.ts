import { afterAll, beforeAll, expect, test } from "bun:test";
import type { LlamaModel } from "node-llama-cpp";
import { ensureChatModel } from "../../../models/cache";
import type { ChatJob } from "../../../src/3-engines/chat-job";
import type { ChatLease } from "../../../src/3-engines/types";
import { LlamaChatEngine } from "../../../src/3-engines/llama/chat-engine";
import type { DecodeLoop } from "../../../src/3-engines/llama/decode-loop";
import { llamaRuntime } from "../../../src/3-engines/llama/runtime";
import { createLogger } from "../../../src/lib/log";
import { THREADS } from "../../models/llama";
import { userJob } from "../../helpers/chat-job";
import { holdLoop, loopOf, noEnd, run } from "./loop-helpers";

// The decode loop (native/loop.cpp, decode-loop.ts) on the real engine and the tiny generated chat
// model: several requests on one context decode in shared steps, say what each says alone, give
// way to live traffic when they are batch work, and leave the slots' cache records right for the
// requests after them, whatever ends them (max tokens, a stop string, an abort).

const MARK = /«force:([\s\S]*?)»/;
const BYTES = /«bytes:([0-9A-F ]+)»/;
const logger = createLogger({ level: "error" });
const runtime = () => llamaRuntime({ device: "cpu", threads: THREADS, logger });

function engine(slots: number, batchSize?: number, contextSize = 512, gapLimit?: number) {
  return new LlamaChatEngine({
    ...(batchSize ? { batchSize } : {}),
    ...(gapLimit !== undefined ? { gapLimit } : {}),
    modelId: "chat",
    modelPath: chatPath,
    runtime,
    contextSize,
    slots,
    threads: THREADS,
    gpuLayers: 0,
    maxQueue: 8,
    maxWaitMs: 60_000,
    logger,
    testForcedTokens: (model: LlamaModel, job: ChatJob) => {
      const text = job.turns.findLast((t) => t.role === "user")!.text;
      const m = MARK.exec(text);
      // «bytes:F0 61»: byte tokens (the generated vocabulary's first 256 tokens are the bytes, in order)
      const bytes = BYTES.exec(text)?.[1]!.split(" ").map((h) => parseInt(h, 16)) ?? [];
      return m ? [...model.tokenize(m[1]!, true), ...bytes] : undefined;
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

/** The decode steps `e`'s loop ran while `f` ran. */
async function countSteps<T>(e: LlamaChatEngine, f: () => Promise<T>): Promise<{ value: T; steps: number }> {
  await e.load();
  const before = loopOf(e).stats().steps;
  const value = await f();
  return { value, steps: loopOf(e).stats().steps - before };
}

const topics = ["bridges", "rivers", "tunnels", "harbours"];
const said = (r: { text: string; finishReason: string; completionTokens: number }) => ({ text: r.text, finishReason: r.finishReason, completionTokens: r.completionTokens });

/**
 * Runs leases at once, watching the loop's events: each carries the step it came in (a token: the
 * decode that gave it), so when each request's first token and its end came is known exactly,
 * however late JavaScript sees them.
 */
async function together(e: LlamaChatEngine, leases: ChatLease[]) {
  await e.load();
  const loop = loopOf(e) as unknown as { onEvents(events: Int32Array): void };
  const deliver = loop.onEvents;
  const firsts = new Map<number, number>();
  const ends = new Map<number, number>();
  loop.onEvents = (events: Int32Array) => {
    for (let i = 0; i < events.length; i += 5) {
      const [seq, , kind, , step] = events.subarray(i, i + 5);
      if (kind === 0 && !firsts.has(seq!)) firsts.set(seq!, step!);
      if (kind !== 0) ends.set(seq!, step!);
    }
    deliver.call(loop, events);
  };
  const before = loopOf(e).stats().steps;
  try {
    const results = await Promise.all(
      leases.map(async (l) => {
        let text = "";
        const r = await l.run((ev) => ev.type === "text" && (text += ev.text), new AbortController().signal).finally(() => l.release());
        return { text, finishReason: r.finishReason, completionTokens: r.completionTokens };
      }),
    );
    const lastStart = Math.max(...firsts.values());
    return {
      results,
      // they ran at once: the last one had its first token before the first one ended (the
      // machine's load may delay a submission by a few steps, not by a whole request)
      overlapped: firsts.size === leases.length && lastStart < Math.min(...ends.values()),
      /** steps from the one where all had started to the last end: each had at most its tokens - 1 to go */
      stepsOnceAllRan: Math.max(...ends.values()) - lastStart,
      /** the step of each one's first token */
      firstSteps: [...firsts.values()],
      /** the step of each one's first token, by its sequence */
      firstBySeq: new Map(firsts),
      steps: loopOf(e).stats().steps - before,
    };
  } finally {
    loop.onEvents = deliver;
  }
}

test("four requests at once decode in shared steps, and each says what it says alone", async () => {
  const tokens = 160;
  const sampling = await noEnd(four);
  const jobs = topics.map((t) => job(`Tell me about ${t}.`, { maxTokens: tokens, sampling }));
  const alone = [];
  for (const j of jobs) alone.push(said(await run(reference, j)));
  expect(alone.every((a) => a.completionTokens === tokens)).toBe(true);
  // every lease taken before any runs, so the four overlap in time
  const leases = await Promise.all(jobs.map(async (j) => (await four.prepare(j)).acquire()));
  const r = await together(four, leases);
  expect(r.results.map(said)).toEqual(alone);
  expect(r.overlapped).toBe(true);
  // one decode per step for all four; one slot per step would be about 4 × (tokens - 1)
  expect(r.stepsOnceAllRan).toBeLessThanOrEqual(tokens);
  expect(r.steps).toBeLessThan(2 * tokens);
});

/** Four prompts of ~700 tokens, one a topic, generating 8 tokens each without ending early. */
async function longPrompts(e: LlamaChatEngine): Promise<ChatJob[]> {
  const long = (t: string) => `Tell me about ${t}. ` + `The ${t} of the old town are described in many books, letters and songs. `.repeat(20);
  const sampling = await noEnd(e);
  return topics.map((t) => job(long(t), { maxTokens: 8, sampling }));
}

test("with gap_limit 0, prompts that come together finish their prefill together, as in one of llama-server's batches (2048 tokens); past that, the first ones generate before the last ones' prefill is done", async () => {
  // four prompts of ~700 tokens on a context of n_batch 128: a plan of 2048 prompt tokens holds
  // the first two whole (they finish together, in its last step) and the start of the third,
  // which finishes with the fourth in the next plan. In the order they came, each finishing as
  // soon as it could, no two finished in one step; shared out evenly, all four finished together.
  // (With a gap limit, the last two are read beside the first two's streams in budgeted steps,
  // the shortest first: step-budget.test.ts.)
  const narrow = engine(4, 128, 1024, 0);
  try {
    const jobs = await longPrompts(narrow);
    const prompts = await Promise.all(jobs.map(async (j) => (await narrow.prepare(j)).promptTokens));
    expect(Math.min(...prompts)).toBeGreaterThan(600);
    expect(prompts[0]! + prompts[1]!).toBeLessThan(2048);
    expect(prompts[0]! + prompts[1]! + prompts[2]!).toBeGreaterThan(2048);
    const leases = await Promise.all(jobs.map(async (j) => (await narrow.prepare(j)).acquire()));
    // the four reach the loop while it waits, so they share its steps from the first
    holdLoop(narrow, 300);
    const r = await together(narrow, leases);
    expect(r.results.map((x) => x.completionTokens)).toEqual([8, 8, 8, 8]);
    const firsts = r.firstSteps.toSorted((a, b) => a - b);
    expect(firsts[0]).toBe(firsts[1]!);
    expect(firsts[2]).toBe(firsts[3]!);
    expect(firsts[1]!).toBeLessThan(firsts[2]!);
  } finally {
    await narrow.unload();
  }
});

test("with gap_limit 0, a prompt waiting for the next plan takes no room from the plan's prompts, whatever slots they are in", async () => {
  // The same four prompts, the slots taken in reverse: the prompt left for the next plan sits in a
  // lower slot than the plan's. It took a token a step beyond the plan's room, the step overflowed
  // n_batch, and the plan's prompt in the highest slot was left out of every step, losing its share:
  // the first two submitted finished 12 steps apart.
  const narrow = engine(4, 128, 1024, 0);
  try {
    const jobs = await longPrompts(narrow);
    const prepared = [];
    for (const j of jobs) prepared.push(await narrow.prepare(j));
    const leases: ChatLease[] = [];
    for (const p of prepared.toReversed()) leases.unshift(await p.acquire());
    // the sequence of each submission, in the order they reach the loop
    const loop = loopOf(narrow) as unknown as { start(slot: { seq: number }, ...rest: unknown[]): void };
    const start = loop.start.bind(loop);
    const submitted: number[] = [];
    loop.start = (slot, ...rest) => (submitted.push(slot.seq), start(slot, ...rest));
    holdLoop(narrow, 300);
    const r = await together(narrow, leases);
    loop.start = start;
    expect(r.results.map((x) => x.completionTokens)).toEqual([8, 8, 8, 8]);
    expect(submitted).toEqual([3, 2, 1, 0]);
    const bySubmission = submitted.map((seq) => r.firstBySeq.get(seq));
    expect(bySubmission[0]).toBeDefined();
    expect(bySubmission[0]).toBe(bySubmission[1]!);
    expect(bySubmission[2]).toBe(bySubmission[3]!);
    expect(bySubmission[1]!).toBeLessThan(bySubmission[2]!);
  } finally {
    await narrow.unload();
  }
});

test("a prompt whose start another slot's cache holds (a running request's prompt) starts from a copy of that cache, and says what it says alone", async () => {
  // two requests with one long system prompt, the second sent while the first generates: without
  // the copy the second prefilled the system prompt again in its own slot (cachedTokens ~0)
  const system = "You are the assistant of the harbour office. " + "Answer questions about ships, tides, berths and cranes in plain words, briefly. ".repeat(10);
  const sampling = await noEnd(four);
  const withSystem = (text: string, maxTokens: number) => job(text, { turns: [{ role: "system", text: system }, { role: "user", text, images: [] }], maxTokens, sampling });
  const a = withSystem("Which ships come in today?", 120);
  const b = withSystem("When is high tide?", 16);
  const systemTokens = (await four.prepare(job(system))).promptTokens;
  expect(systemTokens).toBeGreaterThan(200);
  let first!: () => void;
  const aStarted = new Promise<void>((r) => (first = r));
  const aRun = run(four, a, undefined, () => first());
  await aStarted;
  const bResult = await run(four, b);
  const aResult = await aRun;
  expect(bResult.cachedTokens).toBeGreaterThan(systemTokens - 20);
  // both say what they say alone (the reference engine's one slot, its own cache)
  expect(said(bResult)).toEqual(said(await run(reference, b)));
  expect(said(aResult)).toEqual(said(await run(reference, a)));
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
  const tokens = 120;
  const sampling = await noEnd(four);
  // both leases taken before either runs, so the two overlap in time
  const leases = await Promise.all(["kites", "sails"].map(async (l) => (await four.prepare(job(`Tell me about ${l}.`, { maxTokens: tokens, sampling }))).acquire(undefined, { batch: true })));
  const quiet = await together(four, leases);
  expect(quiet.results.map((r) => r.completionTokens)).toEqual([tokens, tokens]);
  expect(quiet.overlapped).toBe(true);
  // one at a time would be about 2 × (tokens - 1)
  expect(quiet.stepsOnceAllRan).toBeLessThanOrEqual(tokens);
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

test("under a grammar the output is well-formed UTF-8: no overlong or out-of-range sequence the grammar would count as one character", async () => {
  // llama.cpp's grammar decodes F0 8F BF BF (an overlong U+FFFF) and F8 80 80 80 (no character at
  // all) as one character in range, so a JSON string (and a length bound) took bytes that show as
  // four U+FFFD; forced here, they are refused at their first wrong byte
  const schema = { type: "object", properties: { name: { type: "string" } }, required: ["name"], additionalProperties: false };
  for (const bytes of ["F0 8F BF BF", "F8 80 80 80"]) {
    const j = job(`Name it. «force:{"name": "»«bytes:${bytes}»`, { format: { type: "json_schema", name: "n", schema }, maxTokens: 24, sampling: { temperature: 0 } });
    const r = await run(one, j);
    expect(r.text.startsWith('{"name": "')).toBe(true);
    expect(r.text).not.toContain("\uFFFD");
  }
});

test("a cancel sent after its request ended (its end not seen yet) never ends the next request on that slot", async () => {
  await one.load();
  const state = (one as unknown as { state: { loop: DecodeLoop; model: LlamaModel } }).state;
  const { LoopSlot } = await import("../../../src/3-engines/llama/decode-loop");
  const slot = new LoopSlot(0);
  const prompt = state.model.tokenize("Tell me about kites.");
  const sampling = await noEnd(one);
  const bias = { biasTokens: Uint32Array.from(sampling.logitBias.keys()), biasLogits: Float32Array.from(sampling.logitBias.values()) };
  const maxTokens = 200;
  const before = state.loop.stats().tokens;
  const a = state.loop.generate(slot, prompt, 0, { maxTokens, temperature: 0, ...bias });
  expect((await a.next()).done).toBe(false);
  expect(a.end).toBeNull();
  // A finishes in the loop while JavaScript is busy: its end is not seen yet. The loop's count of
  // sampled tokens (read synchronously) says when all of A's are out; under load a fixed wait was
  // too short, and 40 tokens were all out before JavaScript saw the first
  const until = performance.now() + 10_000;
  while (state.loop.stats().tokens - before < maxTokens && performance.now() < until);
  // the loop waits, so A's cancel is still queued when B is submitted on the same slot
  (state.loop.handle as { hold(ms: number): void }).hold(300);
  await a.return();
  expect(a.end?.reason).toBe("max");
  const b = state.loop.generate(slot, slot.cached, slot.cached.length - 1, { maxTokens: 4, temperature: 0, ...bias });
  let tokens = 0;
  for await (const _ of b) tokens++;
  expect({ tokens, end: b.end?.reason }).toEqual({ tokens: 4, end: "max" });
});

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
  const sampling = await noEnd(e);
  let started!: () => void;
  const first = new Promise<void>((r) => (started = r));
  const running = run(e, job("Tell me about ferries.", { maxTokens: 400, sampling }), undefined, () => started());
  const outcome = running.then(() => null, (err: Error) => err.message);
  await first;
  await e.unload();
  expect(await outcome).toBe("the decode loop closed");
  expect(said(await run(e, job("Tell me about canals.")))).toEqual(said(await run(reference, job("Tell me about canals."))));
  await e.unload();
});
