import { afterAll, beforeAll, expect, test } from "bun:test";
import OpenAI from "openai";
import { ensureOnnxModel } from "../../../models/onnx/cache";
import { costMicros, priceFor } from "../../../src/2-services/billing/pricing";
import { BASE, type TestApp } from "../../helpers/app";
import { chatTestApp } from "../../helpers/chat";
import { fileLines, uploadLines, waitForBatch } from "../../helpers/batches";

let t: TestApp;
let key: string;
let client: OpenAI;
beforeAll(async () => {
  t = await chatTestApp({ slots: 2, extraModels: [{ id: "embed", name: "Embed", kind: "embedding", files: { model: await ensureOnnxModel("embed") }, max_context: 512, load: "first_use" }] });
  t.deps.batchWorker.start();
  key = await t.key({ account: "batcher", creditUsd: 5 });
  client = new OpenAI({ apiKey: key, baseURL: `${BASE}/v1`, maxRetries: 0, fetch: (u, i) => t.app.handle(new Request(u, i)) });
});
afterAll(() => t.close());

const emb = (i: number) => ({ custom_id: `e${i}`, url: "/v1/embeddings", body: { model: "embed", input: `sentence number ${i}` } });

test("an embeddings batch runs every line and delivers the output file in line order", async () => {
  const fileId = await uploadLines(client, [0, 1, 2, 3, 4].map(emb));
  const created = await client.batches.create({ input_file_id: fileId, endpoint: "/v1/embeddings", completion_window: "24h", metadata: { job: "nightly" } });
  expect(created).toMatchObject({ object: "batch", status: "validating", endpoint: "/v1/embeddings", input_file_id: fileId, metadata: { job: "nightly" } });
  expect(created.id).toMatch(/^batch_/);
  expect(created.expires_at! - created.created_at).toBe(24 * 3600);
  const done = await waitForBatch(client, created.id);
  expect(done.status).toBe("completed");
  expect(done.request_counts).toEqual({ total: 5, completed: 5, failed: 0 });
  for (const k of ["in_progress_at", "finalizing_at", "completed_at"] as const) expect(done[k]).toBeGreaterThan(0);
  expect(done.error_file_id).toBeNull();
  const out = await fileLines(client, done.output_file_id);
  expect(out.map((l) => l.custom_id)).toEqual(["e0", "e1", "e2", "e3", "e4"]);
  for (const l of out) {
    expect(l.id).toMatch(/^batch_req_/);
    expect(l.error).toBeNull();
    expect(l.response.status_code).toBe(200);
    expect(l.response.body.data[0].embedding).toHaveLength(384);
  }
  const outFile = await client.files.retrieve(done.output_file_id!);
  expect(outFile.purpose).toBe("batch_output");
  expect(outFile.expires_at! - outFile.created_at).toBe(30 * 86400);
});

test("batch lines cost exactly half the live price, charged once per completed line", async () => {
  const account = await t.deps.accounts.getAccount("batcher");
  const before = account.balance_micros;
  const fileId = await uploadLines(client, [10, 11, 12].map(emb));
  const b = await waitForBatch(client, (await client.batches.create({ input_file_id: fileId, endpoint: "/v1/embeddings", completion_window: "24h" })).id);
  const rows = t.deps.db!.query<{ input_tokens: number; cost_micros: number; batch: number }, [string]>(
    "SELECT input_tokens, cost_micros, batch FROM usage WHERE request_id LIKE ?",
  ).all(`req_${b.id.slice(6)}_%`);
  expect(rows).toHaveLength(3);
  const price = priceFor({ kind: "embedding" }, t.deps.config.prices);
  for (const r of rows) {
    expect(r.batch).toBe(1);
    expect(r.cost_micros).toBe(costMicros(price, { inputTokens: r.input_tokens, outputTokens: 0, images: 0 }, 5000));
  }
  expect((await t.deps.accounts.getAccount("batcher")).balance_micros).toBe(before - rows.reduce((n, r) => n + r.cost_micros, 0));
});

test("a mixed chat batch: good lines in the output file, failing ones in the error file, the batch goes on", async () => {
  const lines = [
    { custom_id: "ok-1", url: "/v1/chat/completions", body: { model: "chat", max_tokens: 4, temperature: 0, messages: [{ role: "user", content: "hi" }] } },
    { custom_id: "too-long", url: "/v1/chat/completions", body: { model: "chat", max_tokens: 100000, messages: [{ role: "user", content: "hi" }] } },
    { custom_id: "ok-2", url: "/v1/chat/completions", body: { model: "chat", max_tokens: 4, temperature: 0, messages: [{ role: "user", content: "hello" }] } },
    { custom_id: "bad-schema-at-run", url: "/v1/chat/completions", body: { model: "chat", max_tokens: 4, messages: [{ role: "user", content: "x" }], response_format: { type: "json_schema", json_schema: { name: "n", schema: { type: "array", uniqueItems: true } } } } },
  ];
  const b = await waitForBatch(client, (await client.batches.create({ input_file_id: await uploadLines(client, lines), endpoint: "/v1/chat/completions", completion_window: "24h" })).id);
  expect(b.status).toBe("completed");
  expect(b.request_counts).toEqual({ total: 4, completed: 2, failed: 2 });
  const out = await fileLines(client, b.output_file_id);
  expect(out.map((l) => l.custom_id)).toEqual(["ok-1", "ok-2"]);
  expect(out[0].response.body.object).toBe("chat.completion");
  const errors = await fileLines(client, b.error_file_id);
  expect(errors.map((l) => [l.custom_id, l.response.status_code, l.error.code])).toEqual([
    ["too-long", 400, "context_length_exceeded"],
    ["bad-schema-at-run", 400, "unsupported_schema"],
  ]);
  expect(errors[0].response.body.error.type).toBe("invalid_request_error");
  // Only completed lines are billed.
  const billed = t.deps.db!.query<{ n: number }, [string]>("SELECT COUNT(*) AS n FROM usage WHERE request_id LIKE ?").get(`req_${b.id.slice(6)}_%`)!.n;
  expect(billed).toBe(2);
});

test("a responses batch answers with response objects", async () => {
  // greedy: at the default temperature a random-weights model sometimes ended within 4 tokens (completed)
  const lines = [1, 2].map((i) => ({ custom_id: `r${i}`, url: "/v1/responses", body: { model: "chat", input: `question ${i}`, max_output_tokens: 4, temperature: 0, reasoning: { effort: "none" } } }));
  const b = await waitForBatch(client, (await client.batches.create({ input_file_id: await uploadLines(client, lines), endpoint: "/v1/responses", completion_window: "24h" })).id);
  expect(b.request_counts).toEqual({ total: 2, completed: 2, failed: 0 });
  const out = await fileLines(client, b.output_file_id);
  expect(out.map((l) => [l.custom_id, l.response.body.object, l.response.body.status])).toEqual([
    ["r1", "response", "incomplete"],
    ["r2", "response", "incomplete"],
  ]);
  const row = t.deps.db!.query<{ endpoint: string }, [string]>("SELECT endpoint FROM usage WHERE request_id = ?").get(out[0].response.request_id)!;
  expect(row.endpoint).toBe("/v1/responses");
});

test("the key's batches are listed newest first, with after / limit / has_more", async () => {
  const k = await t.key({ creditUsd: 1 });
  const c = new OpenAI({ apiKey: k, baseURL: `${BASE}/v1`, maxRetries: 0, fetch: (u, i) => t.app.handle(new Request(u, i)) });
  const fileId = await uploadLines(c, [emb(0)]);
  const ids: string[] = [];
  for (let i = 0; i < 3; i++) ids.push((await c.batches.create({ input_file_id: fileId, endpoint: "/v1/embeddings", completion_window: "24h" })).id);
  const first = await (await t.request("GET", "/v1/batches?limit=2", { key: k })).json();
  expect(first.data.map((b: any) => b.id)).toEqual([ids[2], ids[1]]);
  expect(first.has_more).toBe(true);
  const rest = await (await t.request("GET", `/v1/batches?limit=2&after=${first.last_id}`, { key: k })).json();
  expect(rest.data.map((b: any) => b.id)).toEqual([ids[0]]);
  expect(rest.has_more).toBe(false);
  const all: string[] = [];
  for await (const b of c.batches.list()) all.push(b.id);
  expect(all).toEqual([...ids].reverse());
  for (const id of ids) await waitForBatch(c, id);
});
