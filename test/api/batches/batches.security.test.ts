import { afterAll, beforeAll, expect, test } from "bun:test";
import OpenAI from "openai";
import { authSuite } from "../http/auth-suite";
import { BASE, testApp, type TestApp } from "../../helpers/app";
import { uploadLines } from "../../helpers/batches";

async function makeBatch(t: TestApp, key: string) {
  const c = new OpenAI({ apiKey: key, baseURL: `${BASE}/v1`, maxRetries: 0, fetch: (u, i) => t.app.handle(new Request(u, i)) });
  const fileId = await uploadLines(c, [{ custom_id: "a", url: "/v1/embeddings", body: { model: "m", input: "x" } }]);
  return (await c.batches.create({ input_file_id: fileId, endpoint: "/v1/embeddings", completion_window: "24h" })).id;
}

authSuite({
  name: "batches",
  scope: "inference",
  format: "openai",
  routes: [
    { method: "POST", path: "/v1/batches", body: { input_file_id: "file-x", endpoint: "/v1/embeddings", completion_window: "24h" } },
    { method: "GET", path: "/v1/batches" },
    { method: "GET", path: "/v1/batches/batch_x" },
    { method: "POST", path: "/v1/batches/batch_x/cancel" },
  ],
  owned: async (t, ownerKey) => {
    const id = await makeBatch(t, ownerKey);
    return [
      { method: "GET", path: `/v1/batches/${id}` },
      { method: "POST", path: `/v1/batches/${id}/cancel` },
    ];
  },
});

let t: TestApp;
beforeAll(() => {
  t = testApp();
});
afterAll(() => t.close());

test("another key of the same account can neither see nor cancel the batch, nor use the file (spec §5.6)", async () => {
  const owner = await t.key({ account: "team", creditUsd: 1 });
  const sibling = await t.key({ account: "team" });
  const id = await makeBatch(t, owner);
  expect((await t.request("GET", `/v1/batches/${id}`, { key: sibling })).status).toBe(404);
  expect((await t.request("POST", `/v1/batches/${id}/cancel`, { key: sibling })).status).toBe(404);
  expect((await (await t.request("GET", "/v1/batches", { key: sibling })).json()).data).toEqual([]);
  const { input_file_id } = await (await t.request("GET", `/v1/batches/${id}`, { key: owner })).json();
  const res = await t.request("POST", "/v1/batches", { key: sibling, body: { input_file_id, endpoint: "/v1/embeddings", completion_window: "24h" } });
  expect(res.status).toBe(404);
});
