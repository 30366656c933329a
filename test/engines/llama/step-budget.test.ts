import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ensureChatModel } from "../../../models/cache";
import type { ChatJob } from "../../../src/3-engines/chat-job";
import { LlamaChatEngine } from "../../../src/3-engines/llama/chat-engine";
import type { StepRecord } from "../../../src/3-engines/llama/decode-loop";
import { llamaRuntime } from "../../../src/3-engines/llama/runtime";
import { createLogger } from "../../../src/lib/log";
import { userJob } from "../../helpers/chat-job";
import { THREADS } from "../../models/llama";
import { holdLoop, loopOf, noEnd, run, watchSteps } from "./loop-helpers";

// Decode never stalls (issue 46): beside a live stream, a step carries a bounded number of prompt
// tokens, chosen from what the loop measured its steps to cost (native/step-cost.h), and prompts
// waiting for their first token go shortest first, a long one moving forward as it waits
// (native/prompt-order.h). Checked two ways, neither by wall time:
//   - the headers' decisions on step costs the test chooses (a harness compiled from them);
//   - the real loop's own records of its steps, and the steps its tokens came in.

describe("the step budget and the prompt order (native headers)", () => {
  const dir = mkdtempSync(join(tmpdir(), "appliance-schedule-"));
  const bin = join(dir, "schedule-harness");
  beforeAll(() => {
    const native = join(import.meta.dir, "..", "..", "..", "src", "3-engines", "llama", "native");
    const cc = Bun.spawnSync(["c++", "-O1", "-std=c++17", "-Wall", "-Werror", "-I", native, "-o", bin, join(import.meta.dir, "native", "schedule-harness.cpp")], { stderr: "pipe" });
    if (cc.exitCode !== 0) throw new Error(`the harness does not compile: ${cc.stderr.toString()}`);
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  /** Runs the harness over `lines`; the lines it printed. */
  const harness = (lines: string[]): string[] => {
    const r = Bun.spawnSync([bin], { stdin: new TextEncoder().encode(lines.join("\n") + "\n") });
    if (r.exitCode !== 0) throw new Error(`the harness failed: ${r.stderr.toString()}`);
    return r.stdout.toString().trim().split("\n");
  };

  const SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 511];
  /** A stream alone: steps of one token taking `alone` ms (decode `alone` less 0.05 ms of sampling). */
  const stream = (alone: number) => Array.from({ length: 20 }, () => `rec 1 0 ${alone - 0.05} ${alone}`);
  /**
   * Steps beside the stream at every size, `decode(n)` ms each, as the loop takes them to compare
   * two sizes: one between two of the size above it, from the top down.
   */
  const measured = (decode: (n: number) => number) => {
    const step = (n: number) => `rec 1 ${n} ${decode(n)} ${decode(n) + 0.05}`;
    return SIZES.toReversed().flatMap((n, i, down) => (i === 0 ? [] : [step(down[i - 1]!), step(n), step(down[i - 1]!)]));
  };

  test("the budget follows the measured cost: the most tokens that keep a step within gap_limit times the stream's step alone, never so few that the prompt reads at more than 1.1x its cheapest cost a token", () => {
    // a stream's step 1 ms; each prompt token 0.1 ms more. Reading in steps of 128 or more costs
    // within 1.1x a token of the largest; within 30x the stream's step: 256; within 60x: 511 (the room)
    const budgets = (perToken: number) =>
      harness(["cost 4", ...stream(1), ...measured((n) => 0.95 + perToken * n), "budget 1 3 511 100000", "budget 1 30 511 100000", "budget 1 60 511 100000"]).map(Number);
    expect(budgets(0.1)).toEqual([128, 256, 511]);
    // a device twice as slow a prompt token: half as many within the gap; its fixed cost a step
    // weighs less, so smaller steps read as cheaply
    expect(budgets(0.2)).toEqual([64, 128, 256]);
  });

  test("where small steps cost more a token (a CPU's attention under 64 rows), the budget is the smallest step that reads as cheaply as the large ones, past the gap limit", () => {
    // bench-1ms on this 2-core box, 1,500 tokens into a context (ms a step, measured): no step
    // carrying a prompt token keeps within 3x the stream's 0.8 ms, and steps under 64 tokens read
    // at 2.5-7x the cost a token
    const table: Record<number, number> = { 1: 2.7, 2: 4.48, 4: 6.48, 8: 10.48, 16: 17.58, 32: 33.26, 64: 26.31, 128: 51.57, 256: 101.16, 511: 217.99 };
    const out = harness(["cost 4", ...stream(0.8), ...measured((n) => table[n]!), "budget 1 3 511 100000"]);
    expect(Number(out[0])).toBe(64);
  });

  test("prompt_slowdown lets the gap limit win over the prompt's cost a token", () => {
    const table: Record<number, number> = { 1: 2.7, 2: 4.48, 4: 6.48, 8: 10.48, 16: 17.58, 32: 33.26, 64: 26.31, 128: 51.57, 256: 101.16, 511: 217.99 };
    const costs = ["cost 4", ...stream(0.8), ...measured((n) => table[n]!)];
    // within 6x the stream's 0.8 ms step: 2 tokens (4.5 ms). The cheapest a token: 256 (0.40 ms).
    // Allowed 1.1x: 64 (0.41); 3.5x: 8 (1.31 ms a token); 10x: the gap's 2 (2.24)
    expect(harness([...costs, "budget 1 6 511 100000 1.1", "budget 1 6 511 100000 3.5", "budget 1 6 511 100000 10"]).map(Number)).toEqual([64, 8, 2]);
  });

  test("a loop that knows only whole steps comes down to the cheapest small size in a few steps, and stays there", () => {
    const table: Record<number, number> = { 1: 2.7, 2: 4.48, 4: 6.48, 8: 10.48, 16: 17.58, 32: 33.26, 64: 26.31, 128: 51.57, 256: 101.16, 511: 217.99 };
    const decode = (n: number) => {
      const k = SIZES.filter((s) => s <= n).at(-1)!;
      return (table[k]! / k) * n;
    };
    // the loop's own way: ask, run that many, record what it cost
    const steps: number[] = [];
    const lines = ["cost 4", ...stream(0.8), "rec 0 512 218 218"];
    for (let i = 0; i < 40; i++) {
      const b = Number(harness([...lines, "budget 1 3 511 100000"]).at(-1));
      steps.push(b);
      lines.push(`rec 1 ${b} ${decode(b)} ${decode(b) + 0.05}`);
    }
    expect(steps.slice(-20)).toEqual(Array(20).fill(64));
    // on the way down, a few steps larger than 128 tokens: two of each size above it, and one of 128 between two of 256
    expect(steps.filter((b) => b > 128).length).toBeLessThanOrEqual(6);
  });

  test("the last of the prompts goes in one step rather than a small one after it; gap_limit 0 bounds nothing", () => {
    const costs = ["cost 4", ...stream(1), ...measured((n) => 0.95 + 0.1 * n)];
    // 128 a step; 190 waiting: one step of 190, not 128 and 62
    expect(harness([...costs, "budget 1 3 511 190", "budget 1 3 511 1000", "budget 1 0 511 100000"]).map(Number)).toEqual([190, 128, 511]);
  });

  test("prompts go shortest first; a long one moves forward as it waits", () => {
    // [decoded] then per prompt: id, tokens left, decoded when it came, its own decoded
    // a short prompt that comes while a long one is read starts first
    expect(harness(["order 1000 1 3000 0 1000 2 20 1000 0"])[0]!.trim()).toBe("2 1");
    // a 600-token prompt that has waited while 500 tokens of others were read goes before a
    // 250-token prompt that just came; one that waited 300 does not
    expect(harness(["order 500 1 600 0 0 5 250 500 0"])[0]!.trim()).toBe("1 5");
    expect(harness(["order 300 1 600 0 0 5 250 300 0"])[0]!.trim()).toBe("5 1");
    // prompts that came together waited alike: the shorter first, ties in the order they came
    expect(harness(["order 400 1 300 0 0 2 200 0 0 3 200 0 0"])[0]!.trim()).toBe("2 3 1");
  });
});

describe("the decode loop beside a live stream (the tiny chat model)", () => {
  const logger = createLogger({ level: "error" });
  const CONTEXT = 4096;
  const BATCH = 512;
  let path: string;
  const engines: LlamaChatEngine[] = [];
  const engine = (slots: number, gapLimit?: number) => {
    const e = new LlamaChatEngine({
      modelId: "chat",
      modelPath: path,
      runtime: () => llamaRuntime({ device: "cpu", threads: THREADS, logger }),
      contextSize: CONTEXT,
      slots,
      threads: THREADS,
      gpuLayers: 0,
      batchSize: BATCH,
      ...(gapLimit !== undefined ? { gapLimit } : {}),
      maxQueue: 8,
      maxWaitMs: 60_000,
      logger,
    });
    engines.push(e);
    return e;
  };
  beforeAll(async () => {
    path = await ensureChatModel("chat");
    const e = engine(1);
    perSentence = (await e.prepare(job(SENTENCE.repeat(20)))).promptTokens / 20;
  });
  afterAll(async () => {
    for (const e of engines) await e.unload();
  });

  const SENTENCE = "The keeper counted the grey boats past the mill. ";
  let perSentence = 0;
  /** A user message of about `n` tokens, different for each salt. */
  const longText = (salt: string, n: number) => `${salt}. ` + SENTENCE.repeat(Math.ceil(n / perSentence));
  const job = (text: string, o: Partial<ChatJob> = {}) => userJob(text, { maxTokens: 2, ...o });

  /** Stream A generating on `e` until `stop()`, once it has given `settle` tokens. */
  async function streamA(e: LlamaChatEngine, settle = 30) {
    const sampling = await noEnd(e);
    const stop = new AbortController();
    let n = 0;
    let going!: () => void;
    const started = new Promise<void>((r) => (going = r));
    const done = run(e, job("Write a very long story about a lighthouse.", { maxTokens: CONTEXT - 64, sampling }), stop.signal, (ev) => {
      if (ev.type === "text" && ++n === settle) going();
    }).catch(() => null);
    await started;
    return {
      sampling,
      stop: async () => {
        stop.abort();
        await done;
      },
    };
  }

  /** The loop's steps from `after` to `last`. */
  const steps = (e: LlamaChatEngine, after: number, last: number): StepRecord[] => loopOf(e).records(after).filter((r) => r.step <= last);

  test("a long prompt beside a stream: every step gives the stream its token and carries no more prompt tokens than its budget", async () => {
    const e = engine(2);
    const w = await watchSteps(e);
    const a = await streamA(e);
    const before = loopOf(e).stats().steps;
    const b = await run(e, job(longText("B", 3000), { sampling: a.sampling }));
    await a.stop();
    w.stop();
    expect(b.completionTokens).toBe(2);
    expect(b.promptTokens).toBeGreaterThan(2500);
    const [aSeq, bSeq] = [...w.tokens.keys()];
    const bFirst = w.tokens.get(bSeq!)![0]!;
    const prefill = steps(e, before, bFirst).filter((r) => r.prompt > 0);
    expect(prefill.reduce((n, r) => n + r.prompt, 0)).toBeGreaterThan(2500);
    expect(prefill.length).toBeGreaterThanOrEqual(Math.ceil(2500 / BATCH));
    for (const r of prefill) {
      expect(r.budget).toBeGreaterThanOrEqual(1);
      expect(r.prompt).toBeLessThanOrEqual(r.budget);
      expect(r.live).toBe(1);
    }
    // the stream's tokens came in every one of those steps
    const aSteps = new Set(w.tokens.get(aSeq!));
    const missed = prefill.filter((r) => !aSteps.has(r.step)).map((r) => r.step);
    expect(missed).toEqual([]);
  });

  test("a short prompt that arrives while a long one is read beside a stream starts first", async () => {
    const e = engine(3);
    const w = await watchSteps(e);
    const a = await streamA(e);
    const before = loopOf(e).stats().steps;
    const long = run(e, job(longText("L", 3000), { sampling: a.sampling }));
    // once the long prompt's reading is under way, the loop holds while the short one comes
    while (!loopOf(e).records(before).some((r) => r.prompt > 0)) await Bun.sleep(0);
    holdLoop(e, 500);
    expect(w.tokens.size).toBe(1);
    const short = run(e, job("Hello there.", { sampling: a.sampling }));
    const [l, s] = await Promise.all([long, short]);
    await a.stop();
    w.stop();
    expect([l.completionTokens, s.completionTokens]).toEqual([2, 2]);
    expect(l.promptTokens).toBeGreaterThan(2500);
    const [, longSeq, shortSeq] = w.submitted;
    // the short one's first token came first, and it was done before the long one's: in the order
    // they came, it waited for all of the long one
    const longFirst = w.tokens.get(longSeq!)![0]!;
    expect(w.tokens.get(shortSeq!)![0]!).toBeLessThan(longFirst);
    expect(w.ends.get(shortSeq!)!).toBeLessThan(longFirst);
  });

  test("a lone long prompt takes whole plans: full steps, no budget", async () => {
    const e = engine(2);
    await e.load();
    const before = loopOf(e).stats().steps;
    const r = await run(e, job(longText("alone", 3000)));
    expect(r.promptTokens).toBeGreaterThan(2500);
    const prefill = loopOf(e).records(before).filter((x) => x.prompt > 0);
    expect(prefill.every((x) => x.budget === -1)).toBe(true);
    // every step but the last is a full batch
    expect(prefill.slice(0, -1).every((x) => x.prompt === BATCH)).toBe(true);
    expect(prefill.length).toBeGreaterThanOrEqual(Math.ceil(2500 / BATCH));
  });

  test("gap_limit 0: beside a stream too, prompts take whole plans (llama-server's way)", async () => {
    const e = engine(2, 0);
    const a = await streamA(e);
    const before = loopOf(e).stats().steps;
    await run(e, job(longText("B0", 3000), { sampling: a.sampling }));
    await a.stop();
    const prefill = loopOf(e).records(before).filter((x) => x.prompt > 0);
    expect(prefill.every((x) => x.budget === -1)).toBe(true);
    // full steps: the room beside the stream's token
    expect(Math.max(...prefill.map((x) => x.prompt))).toBe(BATCH - 1);
  });
});
