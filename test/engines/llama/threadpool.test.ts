import { afterAll, beforeAll, expect, test } from "bun:test";
import { readdirSync } from "node:fs";
import type { Llama, LlamaModel } from "node-llama-cpp";
import { ensureChatModel } from "../../../models/cache";
import { builtAddon } from "../../../src/3-engines/llama/native/addon-path";
import { attachThreadpool } from "../../../src/3-engines/llama/threadpool";
import { THREADS, testLlama } from "../../models/llama";

// The persistent CPU threadpool on the real engine: the tiny generated chat model, node-llama-cpp's
// prebuilt CPU backend and the llama addon install.sh builds.

let llama: Llama;
let model: LlamaModel;
const threads = () => readdirSync("/proc/self/task").length;

beforeAll(async () => {
  llama = await testLlama();
  model = await llama.loadModel({ modelPath: await ensureChatModel("chat") });
});
afterAll(async () => {
  await model.dispose();
});

test("the llama addon is built (install.sh builds it)", () => {
  expect(builtAddon()).not.toBeNull();
});

test("a context gets a pool of its threads: the workers stay between steps, and greedy output is unchanged", async () => {
  const greedy = async (withPool: boolean) => {
    const context = await model.createContext({ contextSize: 256, threads: THREADS });
    const before = threads();
    const attached = withPool ? attachThreadpool(model, context, THREADS) : null;
    if (attached && "reason" in attached) throw new Error(attached.reason);
    // the caller is thread 0: a pool of THREADS starts THREADS - 1 workers, there before and after decoding
    if (withPool) expect(threads()).toBe(before + THREADS - 1);
    const seq = context.getSequence();
    const out: number[] = [];
    for await (const t of seq.evaluate(model.tokenize("the bridge over the river"), { temperature: 0 })) {
      out.push(t);
      if (out.length === 12) break;
    }
    if (withPool) expect(threads()).toBe(before + THREADS - 1);
    if (attached && "pool" in attached) attached.pool.detach();
    if (withPool) expect(threads()).toBe(before);
    await context.dispose();
    return out;
  };
  const pooled = await greedy(true);
  expect(pooled).toHaveLength(12);
  expect(pooled).toEqual(await greedy(false));
});

test("a context of another model is refused", async () => {
  const other = await llama.loadModel({ modelPath: await ensureChatModel("small-chat") });
  const context = await other.createContext({ contextSize: 128 });
  const attached = attachThreadpool(model, context, 2);
  expect(attached).toEqual({ reason: expect.stringContaining("attachThreadpool(model, context of that model") });
  await context.dispose();
  await other.dispose();
});
