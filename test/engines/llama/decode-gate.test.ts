import { expect, test } from "bun:test";
import type { LlamaContext, LlamaContextSequence } from "node-llama-cpp";
import { batchOrder, DecodeGate } from "../../../src/engines/llama/decode-gate";

// Scheduling only, on a stand-in for node-llama-cpp's internals (the real context is exercised by
// test/api/batches/batches.gate.test.ts). A decode step here takes `stepMs` and records how many
// decodes were in flight together.

function fakeContext(stepMs = 5) {
  let inFlight = 0;
  const widest = { batch: 0 };
  const batchIds = new Set<number>();
  const context = {
    async _decodeTokens(item: { sequenceId: number }) {
      const batch = batchIds.has(item.sequenceId);
      if (batch) widest.batch = Math.max(widest.batch, ++inFlight);
      await Bun.sleep(stepMs);
      if (batch) inFlight--;
      return [];
    },
  };
  const sequences = [0, 1, 2, 3].map((id) => ({ _sequenceId: id, async _eraseContextTokenRanges() {} }));
  const decode = (seq: number) => (context as { _decodeTokens(i: { sequenceId: number }): Promise<unknown> })._decodeTokens({ sequenceId: seq });
  return { context: context as unknown as LlamaContext, sequences: sequences as unknown as LlamaContextSequence[], widest, batchIds, decode };
}

async function generate(decode: (seq: number) => Promise<unknown>, seq: number, steps: number) {
  for (let i = 0; i < steps; i++) await decode(seq);
}

test("beside live traffic batch sequences decode one at a time; once it is quiet, together", async () => {
  const f = fakeContext();
  const gate = DecodeGate.attach(f.context, f.sequences, { widthBesideLive: 1, quietMs: 30 })!;
  for (const id of [0, 1, 2]) gate.leased(f.sequences[id]!, true), f.batchIds.add(id);
  gate.leased(f.sequences[3]!, false);
  await Promise.all([0, 1, 2].map((id) => generate(f.decode, id, 4)));
  expect(f.widest.batch).toBe(1);

  gate.released(f.sequences[3]!);
  await Bun.sleep(40); // quiet
  f.widest.batch = 0;
  await Promise.all([0, 1, 2].map((id) => generate(f.decode, id, 4)));
  expect(f.widest.batch).toBe(3);
});

test("while a live prompt is evaluated, batch sequences hold; live sequences never wait", async () => {
  const f = fakeContext(10);
  const gate = DecodeGate.attach(f.context, f.sequences, { widthBesideLive: Infinity })!;
  gate.leased(f.sequences[0]!, true);
  f.batchIds.add(0);
  gate.leased(f.sequences[3]!, false);
  const done = gate.livePrompt(f.sequences[3]!);
  const order: string[] = [];
  const batchStep = f.decode(0).then(() => order.push("batch"));
  const prompt = f.decode(3).then(() => order.push("prompt"));
  await Promise.all([batchStep, prompt]);
  done();
  expect(order).toEqual(["prompt", "batch"]);
});

test("a version of node-llama-cpp without the wrapped internals gets no gate", () => {
  expect(DecodeGate.attach({} as LlamaContext, [], { widthBesideLive: 1 })).toBeNull();
});

/** A context whose decodes only record the order they were queued in, and finish when told. */
function recordingContext() {
  const queued: number[] = [];
  const pending: { id: number; done: () => void }[] = [];
  const context = {
    _decodeTokens(item: { sequenceId: number }) {
      queued.push(item.sequenceId);
      return new Promise<void>((done) => pending.push({ id: item.sequenceId, done }));
    },
  };
  const sequences = [0, 1, 2, 3].map((id) => ({ _sequenceId: id, async _eraseContextTokenRanges() {} }));
  const decode = (seq: number) => (context as { _decodeTokens(i: { sequenceId: number }): Promise<unknown> })._decodeTokens({ sequenceId: seq });
  const finishAll = () => pending.splice(0).forEach((p) => p.done());
  const finish = (id: number) => pending.splice(pending.findIndex((p) => p.id === id), 1)[0]!.done();
  return { context: context as unknown as LlamaContext, sequences: sequences as unknown as LlamaContextSequence[], queued, decode, finishAll, finish };
}

test("generating sequences queue each step together, in sequence-id order", async () => {
  const f = recordingContext();
  const gate = DecodeGate.attach(f.context, f.sequences, { widthBesideLive: Infinity, stepWaitMs: 5000 })!;
  for (const s of f.sequences) gate.leased(s, false);
  // all four arrive together, out of order: one step, in id order
  const first = [2, 0, 3, 1].map((id) => f.decode(id));
  await Bun.sleep(1);
  expect(f.queued).toEqual([0, 1, 2, 3]);
  f.finishAll();
  await Promise.all(first);
  // next step: 3 and 1 are ready, 0 and 2 are not yet: nothing is queued
  f.queued.length = 0;
  const early = [3, 1].map((id) => f.decode(id));
  await Bun.sleep(5);
  expect(f.queued).toEqual([]);
  // 2 stops generating (idle), 0 arrives: the step goes, in id order
  gate.idle(f.sequences[2]!);
  const late = f.decode(0);
  await Bun.sleep(1);
  expect(f.queued).toEqual([0, 1, 3]);
  f.finishAll();
  await Promise.all([...early, late]);
});

test("a step waits at most stepWaitMs for a sequence that stalls", async () => {
  const f = recordingContext();
  const gate = DecodeGate.attach(f.context, f.sequences, { widthBesideLive: Infinity, stepWaitMs: 30 })!;
  for (const s of f.sequences.slice(0, 2)) gate.leased(s, false);
  const first = [0, 1].map((id) => f.decode(id));
  await Bun.sleep(1);
  expect(f.queued).toEqual([0, 1]);
  f.finishAll();
  await Promise.all(first);
  const since = performance.now();
  const one = f.decode(1); // 0 never comes back
  await Bun.sleep(10);
  expect(f.queued).toEqual([0, 1]);
  while (f.queued.length < 3) await Bun.sleep(2);
  expect(performance.now() - since).toBeGreaterThanOrEqual(25);
  expect(f.queued).toEqual([0, 1, 1]);
  f.finishAll();
  await one;
});

test("a leased sequence is expected at the next step: its first decode joins the others'", async () => {
  const f = recordingContext();
  const gate = DecodeGate.attach(f.context, f.sequences, { widthBesideLive: Infinity, stepWaitMs: 5000 })!;
  gate.leased(f.sequences[0]!, false);
  const zero = f.decode(0);
  await Bun.sleep(1);
  f.finishAll();
  await zero;
  f.queued.length = 0;
  // 1 takes a slot just before 0's next step is ready; it starts a little later, and is waited for
  gate.leased(f.sequences[1]!, false);
  const zeroAgain = f.decode(0);
  await Bun.sleep(5);
  expect(f.queued).toEqual([]);
  const one = f.decode(1);
  await Bun.sleep(1);
  expect(f.queued).toEqual([0, 1]);
  f.finishAll();
  await Promise.all([zeroAgain, one]);
});

test("a step waits for a sequence in the step in flight however long that step takes", async () => {
  const f = recordingContext();
  const gate = DecodeGate.attach(f.context, f.sequences, { widthBesideLive: Infinity, stepWaitMs: 10 })!;
  for (const s of f.sequences.slice(0, 2)) gate.leased(s, false);
  const zero = f.decode(0);
  const first = f.decode(1);
  await Bun.sleep(1);
  expect(f.queued).toEqual([0, 1]);
  f.finish(1); // 1's part of the step is back; 0's is still in flight
  await first;
  const one = f.decode(1);
  await Bun.sleep(40); // four times stepWaitMs: 1 still waits (the two would fall out of phase otherwise)
  expect(f.queued).toEqual([0, 1]);
  f.finish(0);
  await zero;
  const zeroAgain = f.decode(0);
  await Bun.sleep(1);
  expect(f.queued).toEqual([0, 1, 0, 1]);
  f.finishAll();
  await Promise.all([one, zeroAgain]);
});

test("batchOrder shares a batch out evenly and puts the items in sequence-id order", () => {
  const items = [
    { tokens: new Array(300).fill(1), logits: [], evaluationPriority: 5 },
    { tokens: [1], logits: [], evaluationPriority: 5 },
    { tokens: new Array(400).fill(1), logits: [], evaluationPriority: 5 },
    { tokens: [1], logits: [], evaluationPriority: 5 },
  ] as any[];
  const queue = [{ sequenceId: 6 }, { sequenceId: 2 }, { sequenceId: 0 }, { sequenceId: 4 }];
  const picked = batchOrder(() => queue)({ items, size: 512 });
  expect(picked.map((p) => queue[items.indexOf(p.item)]!.sequenceId)).toEqual([0, 2, 4, 6]);
  // the two single tokens in full, the rest split between the long prompts
  expect(picked.map((p) => p.processAmount)).toEqual([255, 1, 1, 255]);
  expect(picked.reduce((a, p) => a + p.processAmount, 0)).toBeLessThanOrEqual(512);
});

// What the step loop (step-loop.ts) asks of the gate: it decodes outside node-llama-cpp's queue.

test("while the step loop waits for the context's lock, node-llama-cpp's sequences hold their next step", async () => {
  const f = recordingContext();
  const gate = DecodeGate.attach(f.context, f.sequences, { widthBesideLive: Infinity, stepWaitMs: 5000 })!;
  gate.leased(f.sequences[1]!, false);
  const lockTaken = gate.lockWanted();
  const step = f.decode(1);
  await Bun.sleep(5);
  expect(f.queued).toEqual([]);
  lockTaken();
  await Bun.sleep(1);
  expect(f.queued).toEqual([1]);
  f.finishAll();
  await step;
});

test("the step loop's batch sequences hold for live prompts and go one at a time beside live traffic", () => {
  const f = recordingContext();
  const gate = DecodeGate.attach(f.context, f.sequences, { widthBesideLive: 1, quietMs: 10_000 })!;
  let wakes = 0;
  gate.onWake(() => wakes++);
  gate.leased(f.sequences[0]!, true);
  gate.leased(f.sequences[1]!, true);
  gate.leased(f.sequences[3]!, false);
  expect([gate.isBatch(0), gate.isBatch(3)]).toEqual([true, false]);
  // beside live traffic: one batch sequence per step; live ones always
  expect([gate.mayDecode(0, 0), gate.mayDecode(1, 1), gate.mayDecode(3, 1)]).toEqual([true, false, true]);
  // a batch sequence in the step in flight counts too
  gate.loopDecoding([1], true);
  expect(gate.mayDecode(0, 0)).toBe(false);
  gate.loopDecoding([1], false);
  expect(wakes).toBe(1);
  // a live prompt: batch sequences hold until it is decoded
  gate.livePrompt(f.sequences[3]!);
  expect([gate.mayDecode(0, 0), gate.mayDecode(3, 0)]).toEqual([false, true]);
  gate.promptDecoded(3);
  expect(wakes).toBe(2);
  expect(gate.mayDecode(0, 0)).toBe(true);
});
