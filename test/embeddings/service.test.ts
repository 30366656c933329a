import { afterAll, beforeAll, expect, test } from "bun:test";
import { onnxTestApp, type OnnxTestApp } from "../helpers/onnx";

// The service as batch lines call it: no HTTP, same checks, batch price.

let t: OnnxTestApp;
beforeAll(async () => {
  t = await onnxTestApp();
});
afterAll(() => t.close());

test("a batch line is billed at the batch share of the live price and marked as batch", async () => {
  const principal = (await t.deps.accounts.authenticate(await t.key({ creditUsd: 1 })))!;
  const input = Array.from({ length: 40 }, (_, i) => `line ${i} of a batch about the weather and the market`);
  const live = await t.deps.embeddings.create(principal, { model: "embed", input }, { requestId: "req_live_embed" });
  const batch = await t.deps.embeddings.create(principal, { model: "embed", input }, { requestId: "req_batch_embed", batch: true, endpoint: "/v1/embeddings" });
  expect(batch.usage).toEqual(live.usage);
  const [l, b] = [t.usageRow("req_live_embed")!, t.usageRow("req_batch_embed")!];
  expect([l.batch, b.batch]).toEqual([0, 1]);
  expect(b.cost_micros).toBe(Math.ceil(l.input_tokens * 0.02 * 0.5));
});

test("a failed embedding releases the reservation: nothing charged, nothing held", async () => {
  const principal = (await t.deps.accounts.authenticate(await t.key({ creditUsd: 1 })))!;
  const engine = t.embedder();
  const embed = engine.embed.bind(engine);
  engine.embed = async () => {
    throw new Error("worker crashed");
  };
  try {
    await expect(t.deps.embeddings.create(principal, { model: "embed", input: "x" }, { requestId: "req_failed_embed" })).rejects.toThrow("worker crashed");
  } finally {
    engine.embed = embed;
  }
  expect(t.usageRow("req_failed_embed")).toBeNull();
  expect(await t.deps.meter.held(principal.accountId)).toEqual({ micros: 0, tokens: 0 });
});
