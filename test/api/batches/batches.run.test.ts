import { afterAll, beforeAll, expect, test } from "bun:test";
import OpenAI from "openai";
import { BASE, type TestApp } from "../../helpers/app";
import { fileLines, uploadLines, waitForBatch } from "../../helpers/batches";
import { chatTestApp } from "../../helpers/chat";

let t: TestApp;
let key: string;
let client: OpenAI;
beforeAll(async () => {
  t = await chatTestApp({ slots: 1 });
  t.deps.batchWorker.start();
  key = await t.key({ account: "runner", creditUsd: 5 });
  client = new OpenAI({ apiKey: key, baseURL: `${BASE}/v1`, maxRetries: 0, fetch: (u, i) => t.app.handle(new Request(u, i)) });
});
afterAll(() => t.close());

const chatLines = (n: number, maxTokens: number, prefix: string) =>
  Array.from({ length: n }, (_, i) => ({
    custom_id: `${prefix}${i}`,
    url: "/v1/chat/completions",
    body: { model: "chat", max_tokens: maxTokens, temperature: 0, chat_template_kwargs: { enable_thinking: false }, messages: [{ role: "user", content: `line ${i}` }] },
  }));

test("while a batch fills the slot, a live request starts within one slot turn", async () => {
  const created = await client.batches.create({ input_file_id: await uploadLines(client, chatLines(12, 120, "p")), endpoint: "/v1/chat/completions", completion_window: "24h" });
  await waitForBatch(client, created.id, (b) => b.request_counts!.completed >= 1);
  const before = (await client.batches.retrieve(created.id)).request_counts!.completed;
  const live = await client.chat.completions.create({ model: "chat", max_tokens: 2, messages: [{ role: "user", content: "me first" }] });
  expect(live.choices).toHaveLength(1);
  const after = (await client.batches.retrieve(created.id)).request_counts!.completed;
  // The live request waited for the batch line holding the slot, not for the batch's queue.
  expect(after - before).toBeLessThanOrEqual(1);
  await client.batches.cancel(created.id);
  await waitForBatch(client, created.id);
}, 60_000);

test("cancel stops the lines not yet started, keeps what finished, and delivers both files", async () => {
  const created = await client.batches.create({ input_file_id: await uploadLines(client, chatLines(20, 80, "c")), endpoint: "/v1/chat/completions", completion_window: "24h" });
  await waitForBatch(client, created.id, (b) => b.request_counts!.completed >= 2);
  const cancelling = await client.batches.cancel(created.id);
  expect(["cancelling", "cancelled"]).toContain(cancelling.status);
  const b = await waitForBatch(client, created.id);
  expect(b.status).toBe("cancelled");
  expect(b.cancelling_at).toBeGreaterThan(0);
  expect(b.cancelled_at).toBeGreaterThan(0);
  const { total, completed, failed } = b.request_counts!;
  expect(total).toBe(20);
  expect(completed + failed).toBe(20);
  expect(completed).toBeGreaterThanOrEqual(2);
  expect(completed).toBeLessThan(20);
  const out = await fileLines(client, b.output_file_id);
  const errors = await fileLines(client, b.error_file_id);
  expect(out).toHaveLength(completed);
  expect(errors).toHaveLength(failed);
  expect(new Set(errors.map((e) => e.error.code))).toEqual(new Set(["batch_cancelled"]));
  expect([...out, ...errors].map((l) => l.custom_id).sort()).toEqual(Array.from({ length: 20 }, (_, i) => `c${i}`).sort());
  // Cancelled lines cost nothing: one usage row per completed line.
  const rows = t.deps.db!.query<{ n: number }, [string]>("SELECT COUNT(*) AS n FROM usage WHERE request_id LIKE ?").get(`req_${b.id.slice(6)}_%`)!.n;
  expect(rows).toBe(completed);
}, 60_000);
