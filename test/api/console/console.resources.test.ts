import { afterAll, beforeAll, expect, test } from "bun:test";
import OpenAI from "openai";
import { BASE, testApp, type TestApp } from "../../helpers/app";
import { getRental, rentalConfig, until } from "../rentals/setup";
import { consoleAccount, consoleClient, type ConsoleClient } from "./client";

// The console's batches and rentals views: the account's resources across its keys, read and
// acted on through the same services as the API.

let t: TestApp;
let c: ConsoleClient;
beforeAll(async () => {
  t = testApp({ config: rentalConfig() });
  await t.deps.rentals.start();
  const pw = await consoleAccount(t, "res-a", { creditUsd: 2 });
  c = consoleClient(t);
  await c.signIn("res-a", pw);
});
afterAll(() => t.close());

test("batches of every key of the account are listed, cancellable, and their files downloadable", async () => {
  const { key } = await t.deps.accounts.createKey({ account: "res-a", kind: "premium" });
  const client = new OpenAI({ apiKey: key, baseURL: `${BASE}/v1`, maxRetries: 0, fetch: (url, init) => t.app.handle(new Request(url, init)) });
  const line = JSON.stringify({ custom_id: "a", method: "POST", url: "/v1/embeddings", body: { model: "none", input: "x" } });
  const file = await client.files.create({ file: new File([line + "\n"], "in.jsonl"), purpose: "batch" });
  const batch = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/embeddings", completion_window: "24h" });
  const listed = (await c.json("GET", "/console/api/batches")).data;
  expect(listed.map((b: any) => b.id)).toEqual([batch.id]);
  expect(listed[0]).toMatchObject({ endpoint: "/v1/embeddings", ended: false, status: batch.status, input_file_id: file.id });
  const cancelled = await c.json("POST", `/console/api/batches/${batch.id}/cancel`);
  expect(["cancelling", "cancelled"]).toContain(cancelled.status);
  expect((await client.batches.retrieve(batch.id)).status).toBe(cancelled.status); // the same batch, seen by the API
  const download = await c.call("GET", `/console/api/files/${file.id}/content`);
  expect(download.status).toBe(200);
  expect(download.headers.get("content-disposition")).toBe('attachment; filename="in.jsonl"');
  expect(await download.text()).toBe(line + "\n");
});

test("rentals of the account are listed with their key, and stopped from the console", async () => {
  const { key } = await t.deps.accounts.createKey({ account: "res-a", kind: "premium", scopes: ["inference", "rental"] });
  const [gpu] = (await c.json("GET", "/console/api/gpus")).data;
  expect(gpu).toMatchObject({ gpu_model: "NVIDIA GeForce RTX 4090", price_per_hour: 0.6 });
  const { rental_id } = await (await t.request("POST", "/api/v1/rentals", { key, body: { node_id: gpu.node_id, type: "jupyter" } })).json();
  await until(() => getRental(t, key, rental_id), (r) => r.status === "running");
  const [row] = (await c.json("GET", "/console/api/rentals")).data;
  expect(row).toMatchObject({ rental_id, status: "running", key: `sk-apl-…${key.slice(-4)}`, billed_minutes: 1 });
  expect(row.connection.url).toContain("token=");
  expect((await c.json("GET", "/console/api/gpus")).data).toEqual([]);
  const stopped = await c.json("POST", `/console/api/rentals/${rental_id}/stop`);
  expect(stopped).toMatchObject({ status: "stopped", stop_reason: "user" });
  expect((await getRental(t, key, rental_id)).status).toBe("stopped");
}, 30_000);
