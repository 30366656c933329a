import { afterAll, beforeAll, expect, test } from "bun:test";
import type { LlamaModel, Token } from "node-llama-cpp";
import { ensureChatModel } from "../../../models/cache";
import type { ChatJob } from "../../../src/3-engines/chat-job";
import { LlamaChatEngine } from "../../../src/3-engines/llama/chat-engine";
import { llamaRuntime } from "../../../src/3-engines/llama/runtime";
import { createLogger } from "../../../src/lib/log";
import { userJob } from "../../helpers/chat-job";
import { testLlama, THREADS } from "../../models/llama";

// Answers scored by the model's own probabilities (issue 47: the Decisions API's engine part,
// native/score.cpp): each answer's tokens chained through the next-token distributions after the
// prompt, shared prefixes decoded once, checked against log-softmax computed by hand from the logits
// node-llama-cpp's own evaluation gives for the same tokens, on a context of its own.

const logger = createLogger({ level: "error" });
let path: string;
let engine: LlamaChatEngine;
let reference: LlamaModel;

beforeAll(async () => {
  path = await ensureChatModel("chat");
  engine = new LlamaChatEngine({
    modelId: "chat",
    modelPath: path,
    runtime: () => llamaRuntime({ device: "cpu", threads: THREADS, logger }),
    contextSize: 1024,
    slots: 2,
    threads: THREADS,
    gpuLayers: 0,
    maxQueue: 4,
    maxWaitMs: 60_000,
    logger,
  });
  await engine.load();
  reference = await (await testLlama()).loadModel({ modelPath: path, gpuLayers: 0 });
});
afterAll(async () => {
  await engine.unload();
  await reference.dispose();
});

const job = (text: string): ChatJob => userJob(text, { maxTokens: 1 });
/** The prompt's tokens as the engine renders them (its template, thinking off). */
const promptOf = async (j: ChatJob) => ((await (engine as unknown as { render(j: ChatJob): Promise<{ promptTokens: number[] }> }).render({ ...j, thinking: false })).promptTokens);

/** log p(answer | prompt) from node-llama-cpp's logits, one fresh sequence per answer. */
async function byHand(prompt: readonly number[], answer: readonly number[]): Promise<number> {
  const context = await reference.createContext({ contextSize: 1024, sequences: 1, threads: THREADS });
  try {
    const sequence = context.getSequence();
    const withLogits = (t: number) => [t as Token, { generateNext: { logits: true } }] as const;
    const items = [...prompt.slice(0, -1), withLogits(prompt.at(-1)!), ...answer.slice(0, -1).map(withLogits)];
    const out = await sequence.controlledEvaluate(items as Parameters<typeof sequence.controlledEvaluate>[0]);
    let sum = 0;
    answer.forEach((token, i) => {
      const logits = out[prompt.length - 1 + i]!.next!.logits! as Map<Token, number>;
      const values = [...logits.values()];
      const top = Math.max(...values);
      const lse = top + Math.log(values.reduce((s, v) => s + Math.exp(v - top), 0));
      sum += logits.get(token as Token)! - lse;
    });
    return sum;
  } finally {
    await context.dispose();
  }
}

test("each answer's log-probability is the chain of the model's own next-token distributions, shared prefixes included", async () => {
  // long enough that the pool keeps it in its slot (a prefix of 32 tokens or fewer counts as none)
  const j = job("The harbour master looks out over the water every morning before the boats leave. Which colour is the sea on a clear day?");
  // two answers of several tokens sharing their first ones, one of one token, one of many
  const answers = ["blue and green", "blue and grey", "grey", "a deep shade of blue"];
  const r = await engine.score(j, answers);
  expect(r.answerTokens[0]!.length).toBeGreaterThan(2);
  expect(r.answerTokens[0]!.slice(0, 2)).toEqual(r.answerTokens[1]!.slice(0, 2));
  const prompt = await promptOf(j);
  expect(r.promptTokens).toBe(prompt.length);
  for (const [i, tokens] of r.answerTokens.entries()) {
    const expected = await byHand(prompt, tokens);
    expect(Number.isFinite(r.logprobs[i]!)).toBe(true);
    expect(Math.abs(r.logprobs[i]! - expected)).toBeLessThan(1e-3);
  }
  // the same again, now from the slot's cache: the same figures
  const again = await engine.score(j, answers);
  expect(again.cachedTokens).toBe(prompt.length - 1);
  for (const [i, lp] of again.logprobs.entries()) expect(Math.abs(lp - r.logprobs[i]!)).toBeLessThan(1e-4);
});

test("a bias that makes one answer certain gives it the probability mass; questions on one input share its reading", async () => {
  const input = "Ticket: I was charged twice for the same subscription renewal. " + "Please refund the second charge as soon as you can. ".repeat(6);
  const answers = ["yes", "no"];
  const model = (engine as unknown as { state: { model: LlamaModel } }).state.model;
  const yes = model.tokenize("yes", false)[0]!;
  const first = await engine.score(job(`${input}\n\nIs this about billing? Answer yes or no.`), answers, { bias: new Map([[yes, 30]]) });
  const p = first.logprobs.map(Math.exp);
  expect(p[0]! / (p[0]! + p[1]!)).toBeGreaterThan(0.99);
  // a second question on the same input: its reading is in the slot's cache
  const second = await engine.score(job(`${input}\n\nIs the customer angry? Answer yes or no.`), answers);
  expect(second.cachedTokens).toBeGreaterThan(100);
  expect(second.logprobs.every((lp) => Number.isFinite(lp) && lp < 0)).toBe(true);
});
