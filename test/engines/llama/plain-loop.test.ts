import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { LlamaContextSequence, type LlamaModel } from "node-llama-cpp";
import { ensureChatModel } from "../../../models/cache";
import type { ChatJob, EngineEvent, EngineResult } from "../../../src/chat/job";
import { LlamaChatEngine } from "../../../src/engines/llama/chat-engine";
import { nativeSampling } from "../../../src/engines/llama/native-sampler";
import { plainMarkers } from "../../../src/engines/llama/plain";
import { llamaRuntime } from "../../../src/engines/llama/runtime";
import { StepLoop } from "../../../src/engines/llama/step-loop";
import { createLogger } from "../../../src/log";
import { forceText, forceTokens } from "../../models/force";
import { THREADS } from "../../models/llama";
import { userJob } from "../../helpers/chat-job";

// The plain generation loop (plain.ts) against LlamaChat on the real engine and the tiny generated
// chat model: the same requests through both give the same events, finish reason and usage.

const MARK = /«force:([\s\S]*?)»/;
/** Forced as plain characters, special tokens' names included. */
const PLAIN = /«plain:([\s\S]*?)»/;
const logger = createLogger({ level: "error" });
const runtime = () => llamaRuntime({ device: "cpu", threads: THREADS, logger });

function engine(plainLoop: boolean, nativeSampling = true, stepLoop = true) {
  return new LlamaChatEngine({
    modelId: "chat",
    modelPath: chatPath,
    runtime,
    contextSize: 1024,
    slots: 1,
    threads: THREADS,
    gpuLayers: 0,
    maxQueue: 4,
    maxWaitMs: 60_000,
    logger,
    plainLoop,
    nativeSampling,
    stepLoop,
    testTokenBias: (model: LlamaModel, job: ChatJob) => {
      const text = job.turns.findLast((t) => t.role === "user")!.text;
      const plainText = PLAIN.exec(text);
      if (plainText) return forceTokens(model, model.tokenize(plainText[1]!, false));
      const m = MARK.exec(text);
      return m ? forceText(model, m[1]!) : undefined;
    },
  });
}

let chatPath: string;
let plain: LlamaChatEngine;
let plainQueue: LlamaChatEngine;
let plainEvaluate: LlamaChatEngine;
let viaChat: LlamaChatEngine;

beforeAll(async () => {
  chatPath = await ensureChatModel("chat");
  plain = engine(true);
  plainQueue = engine(true, true, false);
  plainEvaluate = engine(true, false);
  viaChat = engine(false);
});
afterAll(async () => {
  await plain.unload();
  await plainQueue.unload();
  await plainEvaluate.unload();
  await viaChat.unload();
});

const job = (text: string, o: Partial<ChatJob> = {}) => userJob(text, { maxTokens: 24, ...o });

async function run(e: LlamaChatEngine, j: ChatJob) {
  const prepared = await e.prepare(j);
  const lease = await prepared.acquire();
  const events: EngineEvent[] = [];
  try {
    const result: EngineResult = await lease.run((ev) => {
      const last = events.at(-1);
      // pieces are cut differently by the two loops; what is said, in which part, is the same
      if (last && last.type === ev.type && (ev.type === "text" || ev.type === "reasoning")) (last as { text: string }).text += ev.text;
      else events.push({ ...ev });
    }, new AbortController().signal);
    return { events, result };
  } finally {
    lease.release();
  }
}

/**
 * The plain loop against LlamaChat: decoded by the step loop, through node-llama-cpp's queue
 * (both sampled by the llama addon), and sampled by node-llama-cpp.
 */
async function same(j: ChatJob) {
  const a = await run(plain, j);
  const b = await run(viaChat, j);
  expect(a).toEqual(b);
  expect(await run(plainQueue, j)).toEqual(b);
  expect(await run(plainEvaluate, j)).toEqual(b);
  return a;
}

test("the llama addon samples (install.sh builds it): plain requests are decoded by the step loop, not sequence.evaluate", async () => {
  expect(nativeSampling()).toBe(true);
  const proto = LlamaContextSequence.prototype as unknown as { evaluate: (...a: unknown[]) => unknown };
  const original = proto.evaluate;
  const loop = StepLoop.prototype as unknown as { open: (...a: unknown[]) => unknown };
  const open = loop.open;
  let calls = 0;
  let opened = 0;
  proto.evaluate = function (this: unknown, ...a: unknown[]) {
    calls++;
    return original.apply(this, a);
  };
  loop.open = function (this: unknown, ...a: unknown[]) {
    opened++;
    return open.apply(this, a);
  };
  try {
    await run(plain, job("Tell me about tunnels.", { maxTokens: 4 }));
    expect({ calls, opened }).toEqual({ calls: 0, opened: 1 });
    await run(plainQueue, job("Tell me about tunnels.", { maxTokens: 4 }));
    expect({ calls, opened }).toEqual({ calls: 0, opened: 1 });
    await run(plainEvaluate, job("Tell me about tunnels.", { maxTokens: 4 }));
    expect({ calls, opened }).toEqual({ calls: 1, opened: 1 });
    // the same request through LlamaChat too: the engines' slot caches stay alike for the tests below
    await run(viaChat, job("Tell me about tunnels.", { maxTokens: 4 }));
  } finally {
    proto.evaluate = original;
    loop.open = open;
  }
});

describe("the plain loop says what LlamaChat says", () => {
  test("free text to max_tokens", async () => {
    const { events, result } = await same(job("Tell me about bridges."));
    expect(result.finishReason).toBe("length");
    expect(result.completionTokens).toBe(24);
    expect(events.some((e) => e.type === "text")).toBe(true);
  });

  test("a thought, then the answer", async () => {
    const { events, result } = await same(job(`Think. «force:<think>\nLet me think about it.\n</think>\n\nDone»`, { thinking: true, maxTokens: 30 }));
    expect(events[0]).toEqual({ type: "reasoning", text: "Let me think about it." });
    expect(events[1]?.type).toBe("text");
    expect((events[1] as { text: string }).text.startsWith("\n\nDone")).toBe(true);
    expect(result.reasoningTokens).toBeGreaterThan(3);
  });

  test("a thought holding characters split across tokens counts each of its tokens", async () => {
    const { events, result } = await same(job(`Think. «force:<think>\n漢字 🙂 naïve\n</think>\n\nDone»`, { thinking: true, maxTokens: 30 }));
    expect(events[0]).toEqual({ type: "reasoning", text: "漢字 🙂 naïve" });
    expect(result.reasoningTokens).toBeGreaterThan(4);
  });

  test("a caller's stop string, across tokens, ends the answer before it", async () => {
    const { events, result } = await same(job(`Go. «force:one two STOP three»`, { stop: ["o STO", "never"] }));
    expect(events).toEqual([{ type: "text", text: "one tw" }]);
    expect(result).toMatchObject({ finishReason: "stop", stopSequence: "o STO" });
  });

  test("text that only starts like a stop string is shown once it cannot be one", async () => {
    const { events, result } = await same(job(`Go. «force:one two STAR three»`, { stop: ["STOP"], maxTokens: 8 }));
    expect((events[0] as { text: string }).text.startsWith("one two STAR three")).toBe(true);
    expect(result.finishReason).toBe("length");
  });

  test("the end-of-turn marker written as text stops like the token", async () => {
    const { events, result } = await same(job(`Go. «plain:all done<|im_end|>more»`));
    expect(events).toEqual([{ type: "text", text: "all done" }]);
    expect(result).toMatchObject({ finishReason: "stop", stopSequence: null });
  });

  test("characters split across tokens arrive whole", async () => {
    const { events } = await same(job(`Go. «force:café 漢字 🙂 ok»`, { maxTokens: 20 }));
    expect((events[0] as { text: string }).text.startsWith("café 漢字 🙂 ok")).toBe(true);
  });

  test("cut by max_tokens while text is held as a possible stop string: the text is kept", async () => {
    // LlamaChat drops the held "ST" here; the plain loop shows all that was generated
    const j = job(`Go. «force:one two ST»`, { stop: ["STOP"], maxTokens: 4 });
    const a = await run(plain, j);
    const b = await run(viaChat, j);
    expect(a.events).toEqual([{ type: "text", text: "one two ST" }]);
    expect(b.events).toEqual([{ type: "text", text: "one two" }]);
    expect(a.result).toEqual(b.result);
    expect(a.result.finishReason).toBe("length");
  });

  test("seeded sampling and logit_bias", async () => {
    await same(job("Once upon a time", { sampling: { temperature: 0.9, topK: 20, topP: 0.9, seed: 7, logitBias: new Map([[300, 5]]) } }));
  });

  test("seeded sampling with the default top_k and top_p, with top_p 1 and top_k 0, and a seed past 2^32", async () => {
    await same(job("Once upon a time", { sampling: { temperature: 1.2, seed: 99 } }));
    await same(job("Once upon a time", { sampling: { temperature: 0.7, topP: 1, topK: 0, seed: 3 } }));
    await same(job("Once upon a time", { sampling: { temperature: 0.7, seed: 2 ** 32 + 5 } }));
  });

  test("end-of-turn tokens banned by logit_bias: the answer runs on to max_tokens", async () => {
    const { testLlama } = await import("../../models/llama");
    const vocab = await (await testLlama()).loadModel({ modelPath: chatPath, vocabOnly: true });
    const ends = ["<|im_end|>", "<|endoftext|>"].map((t) => vocab.tokenize(t, true)[0]!);
    await vocab.dispose();
    const free = await same(job("hi", { maxTokens: 160 }));
    expect(free.result.finishReason).toBe("stop"); // ends by itself after ~110 tokens
    const banned = await same(job("hi", { maxTokens: 160, sampling: { temperature: 0, logitBias: new Map(ends.map((id) => [id, -100])) } }));
    expect(banned.result).toMatchObject({ finishReason: "length", completionTokens: 160 });
  });

  test("a prompt already in the slot's cache", async () => {
    const j = job("Tell me about rivers.", { maxTokens: 6 });
    const first = await run(plain, j);
    const again = await run(plain, j);
    expect(again.events).toEqual(first.events);
    expect(again.result).toEqual({ ...first.result, cachedTokens: first.result.promptTokens - 1 });
  });
});

describe("which templates the plain loop takes", () => {
  let model: LlamaModel;
  beforeAll(async () => {
    const { testLlama } = await import("../../models/llama");
    model = await (await testLlama()).loadModel({ modelPath: chatPath });
  });
  afterAll(async () => {
    await model.dispose();
  });
  const stops = (w: import("node-llama-cpp").ChatWrapper) => w.generateContextState({ chatHistory: [{ type: "user", text: "hi" }, { type: "model", response: [] }] }).stopGenerationTriggers;

  test("Qwen: its thought markers and end-of-turn stops in written form", async () => {
    const { QwenChatWrapper } = await import("node-llama-cpp");
    const w = new QwenChatWrapper();
    expect(plainMarkers(model, w, stops(w))).toEqual({
      thought: { open: "<think>\n", close: "\n</think>" },
      templateStops: expect.arrayContaining(["<|im_end|>"]),
    });
  });

  test("a template without segments: stops only", async () => {
    const { GeneralChatWrapper } = await import("node-llama-cpp");
    const w = new GeneralChatWrapper();
    const m = plainMarkers(model, w, stops(w));
    expect(m?.thought).toBeUndefined();
    expect(m?.templateStops.length).toBeGreaterThan(0);
  });

  test("segments other than a thought (Harmony's comments) go through LlamaChat", async () => {
    const { HarmonyChatWrapper } = await import("node-llama-cpp");
    const w = new HarmonyChatWrapper();
    expect(plainMarkers(model, w, [])).toBeNull();
  });
});
