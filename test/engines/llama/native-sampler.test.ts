import { afterAll, beforeAll, expect, test } from "bun:test";
import type { LlamaContext, LlamaModel, Token } from "node-llama-cpp";
import { ensureChatModel } from "../../../models/cache";
import { createNativeSampler, sampleInStep, sampleMany, type NativeSampler, type SamplerConfig } from "../../../src/engines/llama/native-sampler";
import { THREADS, testLlama } from "../../models/llama";

// The llama addon's sampler (native/sampler.cpp) on the real engine and the tiny generated chat
// model: after one decode, the logits of its last token (batch logit index -1) are sampled.

let model: LlamaModel;
let context: LlamaContext;
let greedyToken: Token;

beforeAll(async () => {
  model = await (await testLlama()).loadModel({ modelPath: await ensureChatModel("chat") });
  context = await model.createContext({ contextSize: 256, threads: THREADS });
  const sequence = context.getSequence();
  for await (const t of sequence.evaluate(model.tokenize("the bridge over the river"), { temperature: 0 })) {
    greedyToken = t;
    break;
  }
});
afterAll(async () => {
  await context.dispose();
  await model.dispose();
});

const made: NativeSampler[] = [];
function sampler(config: SamplerConfig): NativeSampler {
  const s = createNativeSampler(model, context, config);
  if (!s) throw new Error("the llama addon is not built with sampling (install.sh builds it)");
  made.push(s);
  return s;
}
afterAll(() => made.forEach((s) => s.dispose()));
/** One sampler's next token from the logits at `index`. */
const one = (s: NativeSampler, index = -1) => sampleMany([s], Int32Array.of(index))[0]!;

test("greedy picks the token node-llama-cpp picked from the same logits", () => {
  expect(one(sampler({ temperature: 0 }))).toBe(greedyToken);
});

test("a logit bias of -Infinity rules the greedy pick out; +100 forces a token; a new bias replaces the old", () => {
  const s = sampler({ temperature: 0 });
  s.setBias(Uint32Array.of(greedyToken), Float32Array.of(-Infinity));
  const second = one(s);
  expect(second).not.toBe(greedyToken);
  expect(second).toBeGreaterThanOrEqual(0);
  s.setBias(Uint32Array.of(7), Float32Array.of(100));
  expect(one(s)).toBe(7);
  s.setBias(new Uint32Array(0), new Float32Array(0));
  expect(one(s)).toBe(greedyToken);
});

test("a seed gives the same draws every time; different seeds differ somewhere", () => {
  const draws = (seed: number) => {
    const s = sampler({ temperature: 1.5, topK: 0, topP: 1, seed });
    return Array.from({ length: 20 }, () => one(s));
  };
  expect(draws(5)).toEqual(draws(5));
  expect(draws(5)).not.toEqual(draws(6));
});

test("sampleMany over threads (a step's worth of work above the threshold) draws what one-by-one sampling draws", () => {
  // 1,000 samples of a ~1,400-token vocabulary: more than 2 × 256k candidates, so it spreads
  const n = 1000;
  const config = (i: number): SamplerConfig => ({ temperature: 1.2, topK: 50, topP: 0.9, seed: i + 1 });
  const many = Array.from({ length: n }, (_, i) => sampler(config(i)));
  const together = Array.from(sampleMany(many, new Int32Array(n).fill(-1)));
  const alone = Array.from({ length: n }, (_, i) => one(sampler(config(i))));
  expect(together).toEqual(alone);
  expect(new Set(together).size).toBeGreaterThan(5);
});

test("sampleInStep groups the calls of one tick and resolves each with its own token", async () => {
  const a = sampler({ temperature: 0 });
  const b = sampler({ temperature: 0 });
  b.setBias(Uint32Array.of(3), Float32Array.of(100));
  expect(await Promise.all([sampleInStep(a, -1), sampleInStep(b, -1)])).toEqual([greedyToken, 3]);
});

test("bad input is refused: a token outside the vocabulary, mismatched lengths, a disposed sampler; no logits gives -1", async () => {
  const s = sampler({ temperature: 0 });
  expect(() => s.setBias(Uint32Array.of(1 << 30), Float32Array.of(1))).toThrow(/outside the vocabulary/);
  expect(() => s.setBias(Uint32Array.of(1, 2), Float32Array.of(1))).toThrow(/as many logits as tokens/);
  expect(one(s, 12345)).toBe(-1);
  s.dispose();
  expect(() => s.setBias(new Uint32Array(0), new Float32Array(0))).toThrow(/disposed/);
  expect(one(s)).toBe(-1);
  // in a step, a disposed sampler gets -1 and the others of the step their tokens
  const live = sampler({ temperature: 0 });
  expect(await Promise.all([sampleInStep(s, -1), sampleInStep(live, -1)])).toEqual([-1, greedyToken]);
});
