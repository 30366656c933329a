import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { LlamaModel, Token } from "node-llama-cpp";
import { ensureChatModel } from "../../../models/cache";
import type { ChatJob, EngineEvent, EngineResult } from "../../../src/3-engines/chat-job";
import { LlamaChatEngine } from "../../../src/3-engines/llama/chat-engine";
import { outputMarkers } from "../../../src/3-engines/llama/markers";
import { llamaRuntime } from "../../../src/3-engines/llama/runtime";
import { createLogger } from "../../../src/lib/log";
import { viaLlamaChat } from "../../helpers/llama-chat-reference";
import { THREADS } from "../../models/llama";
import { userJob } from "../../helpers/chat-job";

// Generation on the decode loop (generation.ts, native/loop.cpp) against node-llama-cpp's LlamaChat,
// which the engine used before issue 29, on the real engine and the tiny generated chat model: the
// same requests give the same events, finish reason and usage.

const MARK = /«force:([\s\S]*?)»/;
/** Forced as plain characters, special tokens' names included. */
const PLAIN = /«plain:([\s\S]*?)»/;
const logger = createLogger({ level: "error" });
const runtime = () => llamaRuntime({ device: "cpu", threads: THREADS, logger });

function forcedOf(model: LlamaModel, job: ChatJob): Token[] | undefined {
  const text = job.turns.findLast((t) => t.role === "user")!.text;
  const plainText = PLAIN.exec(text);
  if (plainText) return model.tokenize(plainText[1]!, false);
  const m = MARK.exec(text);
  return m ? model.tokenize(m[1]!, true) : undefined;
}

let chatPath: string;
let engine: LlamaChatEngine;
let reference: LlamaModel;

beforeAll(async () => {
  chatPath = await ensureChatModel("chat");
  engine = new LlamaChatEngine({
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
    testForcedTokens: forcedOf,
  });
  reference = await (await runtime()).llama.loadModel({ modelPath: chatPath, gpuLayers: 0 });
});
afterAll(async () => {
  await engine.unload();
  await reference.dispose();
});

const job = (text: string, o: Partial<ChatJob> = {}) => userJob(text, { maxTokens: 24, ...o });

async function run(e: LlamaChatEngine, j: ChatJob) {
  const prepared = await e.prepare(j);
  const lease = await prepared.acquire();
  const events: EngineEvent[] = [];
  try {
    const result: EngineResult = await lease.run((ev) => {
      const last = events.at(-1);
      // pieces are cut differently; what is said, in which part, is the same
      if (last && last.type === ev.type && (ev.type === "text" || ev.type === "reasoning")) (last as { text: string }).text += ev.text;
      else events.push({ ...ev });
    }, new AbortController().signal);
    return { events, result };
  } finally {
    lease.release();
  }
}

/** The engine against LlamaChat (usage compared but for the prompt, which LlamaChat counts its own way). */
async function same(j: ChatJob) {
  const a = await run(engine, j);
  const b = await viaLlamaChat(reference, j, forcedOf(reference, j));
  const { promptTokens: _, cachedTokens: __, ...mine } = a.result;
  expect({ events: a.events, result: mine }).toEqual({ events: b.events, result: b.result });
  return a;
}

test("a request is decoded by the context's decode loop", async () => {
  const { DecodeLoop } = await import("../../../src/3-engines/llama/decode-loop");
  const proto = DecodeLoop.prototype as unknown as { generate: (...a: unknown[]) => unknown };
  const original = proto.generate;
  let calls = 0;
  proto.generate = function (this: unknown, ...a: unknown[]) {
    calls++;
    return original.apply(this, a);
  };
  try {
    await run(engine, job("Tell me about tunnels.", { maxTokens: 4 }));
  } finally {
    proto.generate = original;
  }
  expect(calls).toBe(1);
});

describe("generation says what LlamaChat says", () => {
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
    // LlamaChat drops the held "ST" here; the engine shows all that was generated
    const j = job(`Go. «force:one two ST»`, { stop: ["STOP"], maxTokens: 4 });
    const a = await run(engine, j);
    const b = await viaLlamaChat(reference, j, forcedOf(reference, j));
    expect(a.events).toEqual([{ type: "text", text: "one two ST" }]);
    expect(b.events).toEqual([{ type: "text", text: "one two" }]);
    const { promptTokens: _, cachedTokens: __, ...mine } = a.result;
    expect(mine).toEqual(b.result);
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
  }, 30_000);

  test("a prompt already in the slot's cache", async () => {
    const j = job("Tell me about rivers.", { maxTokens: 6 });
    const first = await run(engine, j);
    const again = await run(engine, j);
    expect(again.events).toEqual(first.events);
    expect(again.result).toEqual({ ...first.result, cachedTokens: first.result.promptTokens - 1 });
  });
});

describe("structured output after thinking", () => {
  test("a thought ended by end-of-generation is closed and answered under the schema from the answer's first token", async () => {
    const schema = { type: "object", properties: { n: { type: "integer", minimum: 0, maximum: 9 } }, required: ["n"], additionalProperties: false };
    const { events, result } = await run(engine, job(`Answer. «force:<think>\nhm<|im_end|>»`, { thinking: true, maxTokens: 60, format: { type: "json_schema", name: "out", schema } }));
    expect(events[0]).toEqual({ type: "reasoning", text: "hm" });
    const answer = events.filter((e) => e.type === "text").map((e) => (e as { text: string }).text).join("");
    const parsed = JSON.parse(answer);
    expect(Object.keys(parsed)).toEqual(["n"]);
    expect(Number.isInteger(parsed.n) && parsed.n >= 0 && parsed.n <= 9).toBe(true);
    expect(result.finishReason).toBe("stop");
  });
});

describe("tools beside a schema (an agent's tools and its output type)", () => {
  const schema = { type: "object", properties: { mood: { enum: ["ok", "bad"] } }, required: ["mood"], additionalProperties: false };
  const tools = [{ name: "get_time", parameters: { type: "object", properties: { zone: { enum: ["utc", "local"] } }, required: ["zone"] } }];
  const beside = (text: string, o: Partial<ChatJob> = {}) => job(text, { tools, format: { type: "json_schema", name: "out", schema }, maxTokens: 80, ...o });
  const texts = (events: EngineEvent[]) => events.filter((e) => e.type === "text").map((e) => (e as { text: string }).text).join("");
  const prose = "Fine, thanks. It is sunny and warm today with a light breeze from the sea, and there is nothing more to add at all, really and truly, my friend.";

  test("free text that begins no call is not the answer: it is dropped, and the answer comes under the schema with the budget left", async () => {
    const { events, result } = await run(engine, beside(`How are you? «force:${prose}»`));
    expect(JSON.parse(texts(events))).toHaveProperty("mood");
    expect(["ok", "bad"]).toContain(JSON.parse(texts(events)).mood);
    expect(texts(events)).not.toContain("sunny");
    expect(result.finishReason).toBe("stop");
    // the free text's tokens were spent: 24 and the one that went past, then the answer's
    expect(result.completionTokens).toBeGreaterThan(25);
    expect(result.toolCalls).toEqual([]);
  });

  test("free text ended by the model (end of turn) is not the answer either", async () => {
    const { events, result } = await run(engine, beside(`How are you? «force:Fine.<|im_end|>»`));
    expect(["ok", "bad"]).toContain(JSON.parse(texts(events)).mood);
    expect(result.finishReason).toBe("stop");
  });

  test("free text cut by max_tokens before it decided: nothing of it is shown, and the finish is length", async () => {
    // cut just after a "<" (held as a possible call opening): that is not shown either
    const cutText = "Fine, thanks. See <";
    const n = reference.tokenize(cutText, true).length;
    const { events, result } = await run(engine, beside(`How are you? «force:${cutText}»`, { maxTokens: n }));
    expect(texts(events)).toBe("");
    expect(result.finishReason).toBe("length");
    expect(result.completionTokens).toBe(n);
  });

  test("a call begun in the free text is a call, and the text before it is shown", async () => {
    const call = `<tool_call>\n{"name": "get_time", "arguments": {"zone": "utc"}}\n</tool_call>`;
    const { events, result } = await run(engine, beside(`What time is it? «force:Let me look. ${call}»`, { parallelToolCalls: false }));
    expect(texts(events)).toBe("Let me look. ");
    expect(result.finishReason).toBe("tool_calls");
    expect(result.toolCalls).toEqual([{ name: "get_time", arguments: '{"zone": "utc"}' }]);
  });

  test("thinking: the thought is kept as reasoning, and the answer comes after it under the schema", async () => {
    const { events, result } = await run(engine, beside(`How are you? «force:<think>\nhm\n</think>\n\n${prose}»`, { thinking: true, maxTokens: 120 }));
    expect(events[0]).toEqual({ type: "reasoning", text: "hm" });
    expect(["ok", "bad"]).toContain(JSON.parse(texts(events)).mood);
    expect(result.finishReason).toBe("stop");
    expect(result.reasoningTokens).toBeGreaterThan(0);
  });
});

describe("the template markers the output is split by", () => {
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
    expect(outputMarkers(model, w, stops(w))).toEqual({
      thought: { open: "<think>\n", close: "\n</think>" },
      templateStops: expect.arrayContaining(["<|im_end|>"]),
      calls: { prefix: '<tool_call>\n{"name": "', paramsPrefix: '", "arguments": ', suffix: "}\n</tool_call>", betweenCalls: "\n", sectionSuffix: "<|im_end|>\n" },
    });
  });

  test("a template without segments: stops only", async () => {
    const { GeneralChatWrapper } = await import("node-llama-cpp");
    const w = new GeneralChatWrapper();
    const m = outputMarkers(model, w, stops(w));
    expect(m?.thought).toBeUndefined();
    expect(m?.templateStops.length).toBeGreaterThan(0);
  });

  test("segments other than a thought (Harmony's comments) are not told apart: their text is answer text", async () => {
    const { HarmonyChatWrapper } = await import("node-llama-cpp");
    const w = new HarmonyChatWrapper();
    const m = outputMarkers(model, w, []);
    expect(m.templateStops).toEqual([]);
  });
});
