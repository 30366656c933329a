import { expect, test } from "bun:test";
import type { LlamaContext, LlamaContextSequence } from "node-llama-cpp";
import { DecodeGate } from "../../../src/engines/llama/decode-gate";

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
