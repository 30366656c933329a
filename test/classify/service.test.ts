import { afterAll, beforeAll, expect, test } from "bun:test";
import { onnxTestApp, type OnnxTestApp } from "../helpers/onnx";

// The service as batch lines call it: no HTTP, same checks, batch price.

let t: OnnxTestApp;
beforeAll(async () => {
  t = await onnxTestApp();
});
afterAll(() => t.close());

const pairs = Array.from({ length: 30 }, (_, i) => ({ premise: `The store opens at ${i} in the morning.`, hypothesis: "Customers can shop early." }));

test("a batch line is billed at the batch share of $0.05 per million input tokens", async () => {
  const principal = (await t.deps.accounts.authenticate(await t.key({ creditUsd: 1 })))!;
  const live = await t.deps.classify.classify(principal, { model: "nli", pairs }, { requestId: "req_live_nli" });
  await t.deps.classify.classify(principal, { model: "nli", pairs }, { requestId: "req_batch_nli", batch: true });
  const [l, b] = [t.usageRow("req_live_nli")!, t.usageRow("req_batch_nli")!];
  expect(l.input_tokens).toBe(live.usage.prompt_tokens);
  expect([l.batch, b.batch]).toEqual([0, 1]);
  expect(l.cost_micros).toBe(Math.ceil(l.input_tokens * 0.05));
  expect(b.cost_micros).toBe(Math.ceil(l.input_tokens * 0.05 * 0.5));
});

test("a failed classification releases the reservation: nothing charged, nothing held", async () => {
  const principal = (await t.deps.accounts.authenticate(await t.key({ creditUsd: 1 })))!;
  const engine = t.classifier();
  const classify = engine.classify.bind(engine);
  engine.classify = async () => {
    throw new Error("worker crashed");
  };
  try {
    await expect(t.deps.classify.classify(principal, { model: "nli", pairs }, { requestId: "req_failed_nli" })).rejects.toThrow("worker crashed");
  } finally {
    engine.classify = classify;
  }
  expect(t.usageRow("req_failed_nli")).toBeNull();
  expect(await t.deps.meter.held(principal.accountId)).toEqual({ micros: 0, tokens: 0 });
});
