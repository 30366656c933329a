import { afterAll, beforeAll, expect, test } from "bun:test";
import OpenAI from "openai";
import { ensureOnnxModel } from "../../../models/onnx/cache";
import { ManualClock } from "../../../src/lib/clock";
import { BASE, type TestApp } from "../../helpers/app";
import { fileLines, uploadLines, waitForBatch } from "../../helpers/batches";
import { chatTestApp } from "../../helpers/chat";

let t: TestApp;
let client: OpenAI;
const clock = new ManualClock(Date.now());
beforeAll(async () => {
  t = await chatTestApp({ clock, extraModels: [{ id: "embed", name: "Embed", kind: "embedding", files: { model: await ensureOnnxModel("embed") }, max_context: 512, load: "first_use" }] });
  client = new OpenAI({ apiKey: await t.key({ account: "erring", creditUsd: 5 }), baseURL: `${BASE}/v1`, maxRetries: 0, fetch: (u, i) => t.app.handle(new Request(u, i)) });
});
afterAll(() => t.close());

test("a file with bad lines fails validation, every problem listed by line number, nothing charged", async () => {
  t.deps.batchWorker.start();
  const ok = { method: "POST", url: "/v1/embeddings", body: { model: "embed", input: "x" } };
  const text = [
    JSON.stringify({ custom_id: "a", ...ok }),
    "{not json",
    JSON.stringify({ custom_id: "a", ...ok }),
    JSON.stringify({ ...ok }),
    JSON.stringify({ custom_id: "m", ...ok, method: "GET" }),
    JSON.stringify({ custom_id: "u", ...ok, url: "/v1/chat/completions" }),
    "",
    JSON.stringify({ custom_id: "model", ...ok, body: { model: "no-such-model", input: "x" } }),
    JSON.stringify({ custom_id: "kind", ...ok, body: { model: "chat", input: "x" } }),
    JSON.stringify({ custom_id: "schema", ...ok, body: { model: "embed", input: 5, encoding_format: "hex" } }),
  ].join("\n");
  const b = await waitForBatch(client, (await client.batches.create({ input_file_id: await uploadLines(client, text), endpoint: "/v1/embeddings", completion_window: "24h" })).id);
  expect(b.status).toBe("failed");
  expect(b.failed_at).toBeGreaterThan(0);
  expect(b.request_counts).toEqual({ total: 0, completed: 0, failed: 0 });
  expect(b.errors!.data!.map((e) => [e.line, e.code, e.param])).toEqual([
    [2, "invalid_json", null],
    [3, "duplicate_custom_id", "custom_id"],
    [4, "missing_custom_id", "custom_id"],
    [5, "invalid_method", "method"],
    [6, "invalid_url", "url"],
    [8, "model_not_found", "body.model"], // line 7 is blank: skipped, still counted
    [9, "invalid_request", "body.model"],
    [10, "invalid_request", expect.stringMatching(/^body\.(input|encoding_format)/)],
  ]);
  expect(b.errors!.data![1]!.message).toContain("already used on line 1");
  expect(b.output_file_id).toBeNull();
  expect(t.deps.db!.query("SELECT COUNT(*) AS n FROM usage").get()).toEqual({ n: 0 });
});

test("a line's field that takes several shapes is worded as a live request's 400 is, not \"expected union value\"", async () => {
  const line = (custom_id: string, body: Record<string, unknown>) => JSON.stringify({ custom_id, method: "POST", url: "/v1/chat/completions", body: { model: "chat", messages: [{ role: "user", content: "hi" }], ...body } });
  const text = [line("t", { temperature: "hot" }), line("s", { stop: ["a", 5] })].join("\n");
  const b = await waitForBatch(client, (await client.batches.create({ input_file_id: await uploadLines(client, text), endpoint: "/v1/chat/completions", completion_window: "24h" })).id);
  expect(b.status).toBe("failed");
  const [temperature, stop] = b.errors!.data!;
  expect(temperature).toMatchObject({ line: 1, param: "body.temperature" });
  expect(temperature!.message).toMatch(/^line 1: body\.temperature: must be a number/);
  expect(stop).toMatchObject({ line: 2, param: "body.stop[1]" });
  for (const e of b.errors!.data!) expect(e.message).not.toContain("union");
});

test("an empty file fails validation", async () => {
  const b = await waitForBatch(client, (await client.batches.create({ input_file_id: await uploadLines(client, "\n\n"), endpoint: "/v1/embeddings", completion_window: "24h" })).id);
  expect(b.status).toBe("failed");
  expect(b.errors!.data![0]!.code).toBe("empty_file");
});

test("creation refuses a wrong endpoint, window, file or metadata with a named 400", async () => {
  const fileId = await uploadLines(client, [{ custom_id: "a", url: "/v1/embeddings", body: { model: "embed", input: "x" } }]);
  for (const [body, param] of [
    [{ input_file_id: fileId, endpoint: "/v1/images/generations", completion_window: "24h" }, "endpoint"],
    [{ input_file_id: fileId, endpoint: "/v1/embeddings", completion_window: "1h" }, "completion_window"],
    [{ input_file_id: fileId, endpoint: "/v1/embeddings", completion_window: "24h", metadata: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, "v"])) }, "metadata"],
    [{ endpoint: "/v1/embeddings", completion_window: "24h" }, "input_file_id"],
  ] as const) {
    const err = await client.batches.create(body as any).catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect(err.param).toBe(param);
  }
  const missing = await client.batches.create({ input_file_id: "file-nope", endpoint: "/v1/embeddings", completion_window: "24h" }).catch((e) => e);
  expect(missing).toBeInstanceOf(OpenAI.NotFoundError);
});

test("a batch not finished within its window expires; unrun lines go to the error file as batch_expired", async () => {
  await t.deps.batchWorker.stop(); // hold the worker so that nothing runs before the window ends
  const lines = [0, 1, 2].map((i) => ({ custom_id: `x${i}`, url: "/v1/embeddings", body: { model: "embed", input: `late ${i}` } }));
  const created = await client.batches.create({ input_file_id: await uploadLines(client, lines), endpoint: "/v1/embeddings", completion_window: "24h" });
  clock.advance(25 * 3_600_000);
  t.deps.batchWorker.start();
  const b = await waitForBatch(client, created.id);
  expect(b.status).toBe("expired");
  expect(b.expired_at).toBeGreaterThan(0);
  expect(b.request_counts).toEqual({ total: 3, completed: 0, failed: 3 });
  const errors = await fileLines(client, b.error_file_id);
  expect(errors.map((e) => [e.custom_id, e.response, e.error.code])).toEqual([
    ["x0", null, "batch_expired"],
    ["x1", null, "batch_expired"],
    ["x2", null, "batch_expired"],
  ]);
});

test("a batch that is over can no longer be cancelled", async () => {
  const [done] = (await client.batches.list()).data.filter((b) => b.status === "expired");
  const err = await client.batches.cancel(done!.id).catch((e) => e);
  expect(err.status).toBe(409);
});
