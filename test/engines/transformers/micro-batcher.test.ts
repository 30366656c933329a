import { expect, test } from "bun:test";
import { MicroBatcher, type BatchLimits } from "../../../src/3-engines/transformers/micro-batcher";

// A fake model: each sequence is a string whose length is its token count; the result is the
// string upper-cased. Runs are recorded and can be held open to queue work behind them.

function fake(limits: Partial<BatchLimits> = {}) {
  const runs: string[][] = [];
  let gate: Promise<void> | null = null;
  let failNext: Error | null = null;
  const batcher = new MicroBatcher<string, string>(
    async (seqs) => {
      runs.push(seqs);
      if (gate) await gate;
      if (failNext) {
        const e = failNext;
        failNext = null;
        throw e;
      }
      return seqs.map((s) => s.toUpperCase());
    },
    (s) => s.length,
    { maxDelayMs: 2, maxBatch: 4, maxTokens: 100, ...limits },
  );
  return {
    batcher,
    runs,
    hold() {
      let open!: () => void;
      gate = new Promise((r) => (open = r));
      return () => {
        gate = null;
        open();
      };
    },
    failNext: (e: Error) => (failNext = e),
  };
}

test("requests submitted within the delay share one run and each gets its own results in order", async () => {
  const f = fake();
  const [a, b] = await Promise.all([f.batcher.submit(["ab", "cd"]), f.batcher.submit(["ef"])]);
  expect(a).toEqual(["AB", "CD"]);
  expect(b).toEqual(["EF"]);
  expect(f.runs).toEqual([["ab", "cd", "ef"]]);
  expect(f.batcher.runs).toBe(1);
});

test("with no delay, a lone request starts on the next turn, and requests of the same turn share its run", async () => {
  const f = fake({ maxDelayMs: 0 });
  const started = performance.now();
  const [a, b] = await Promise.all([f.batcher.submit(["ab"]), f.batcher.submit(["cd"])]);
  expect(performance.now() - started).toBeLessThan(50);
  expect([a, b]).toEqual([["AB"], ["CD"]]);
  expect(f.runs).toEqual([["ab", "cd"]]);
});

test("a run holds at most maxBatch sequences and maxTokens padded tokens, and always at least one", async () => {
  const f = fake({ maxBatch: 3, maxTokens: 12 });
  const out = await f.batcher.submit(["a", "b", "c", "d", "eeeee", "ffffff", "x".repeat(20)]);
  expect(out).toEqual(["A", "B", "C", "D", "EEEEE", "FFFFFF", "X".repeat(20)]);
  // 3 sequences; then d+eeeee = 2×5 = 10 ≤ 12, +ffffff = 3×6 > 12; ffffff alone; the 20-token one alone (over budget).
  expect(f.runs.map((r) => r.length)).toEqual([3, 2, 1, 1]);
});

test("work that queues during a run goes in the next run, started as soon as the first ends", async () => {
  const f = fake();
  const release = f.hold();
  const first = f.batcher.submit(["a"]);
  await Bun.sleep(5);
  const later = [f.batcher.submit(["b"]), f.batcher.submit(["c"]), f.batcher.submit(["d"])];
  await Bun.sleep(5);
  expect(f.runs).toEqual([["a"]]);
  release();
  expect(await first).toEqual(["A"]);
  expect(await Promise.all(later)).toEqual([["B"], ["C"], ["D"]]);
  expect(f.runs).toEqual([["a"], ["b", "c", "d"]]);
});

test("a failed run fails only the requests with sequences in it", async () => {
  const f = fake({ maxBatch: 2 });
  const release = f.hold();
  f.failNext(new Error("model crashed"));
  const inFailed = f.batcher.submit(["a", "b"]);
  await Bun.sleep(5);
  const next = f.batcher.submit(["c"]);
  release();
  await expect(inFailed).rejects.toThrow("model crashed");
  expect(await next).toEqual(["C"]);
});

test("a request spanning a failed run and a later one fails once, and its remaining sequences are dropped", async () => {
  const f = fake({ maxBatch: 2 });
  f.failNext(new Error("boom"));
  const r = f.batcher.submit(["a", "b", "c", "d"]);
  await expect(r).rejects.toThrow("boom");
  await Bun.sleep(10);
  expect(f.runs).toEqual([["a", "b"]]);
  expect(f.batcher.queued).toBe(0);
});

test("an aborted request leaves the queue at once; the others are served", async () => {
  const f = fake();
  const release = f.hold();
  const first = f.batcher.submit(["a"]);
  await Bun.sleep(5);
  const controller = new AbortController();
  const leaving = f.batcher.submit(["b", "c"], controller.signal);
  const staying = f.batcher.submit(["d"]);
  controller.abort(new Error("client left"));
  await expect(leaving).rejects.toThrow("client left");
  expect(f.batcher.queued).toBe(1);
  release();
  await first;
  expect(await staying).toEqual(["D"]);
  expect(f.runs).toEqual([["a"], ["d"]]);
});

test("a request aborted while its run is in progress is answered at once and the run's result is dropped", async () => {
  const f = fake();
  const release = f.hold();
  const controller = new AbortController();
  const leaving = f.batcher.submit(["a"], controller.signal);
  const staying = f.batcher.submit(["b"]);
  await Bun.sleep(5);
  controller.abort(new Error("gone"));
  await expect(leaving).rejects.toThrow("gone");
  release();
  expect(await staying).toEqual(["B"]);
});

test("an already aborted signal is refused without queueing", async () => {
  const f = fake();
  const controller = new AbortController();
  controller.abort(new Error("before"));
  await expect(f.batcher.submit(["a"], controller.signal)).rejects.toThrow("before");
  expect(f.batcher.queued).toBe(0);
  expect(await f.batcher.submit([])).toEqual([]);
});
