import { afterAll, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { testApp } from "../../helpers/app";
import { manifestConfig } from "../../helpers/models";

const t = testApp({ config: manifestConfig() });
afterAll(() => t.close());
const key = await t.key({ creditUsd: 1 });

test("GET /v1/models lists every configured model with the spec's fields and its kind", async () => {
  const res = await t.request("GET", "/v1/models", { key });
  expect(res.status).toBe(200);
  const body = await res.json();
  expect(body.object).toBe("list");
  expect(body.data.map((m: any) => [m.id, m.name, m.kind, m.max_context, m.supports_vision])).toEqual([
    ["big-chat", "Big Chat", "chat", 32768, true],
    ["small-chat", "Small Chat", "chat", 16384, undefined],
    ["org/embed-384", "Embed", "embedding", 512, undefined],
  ]);
  // supports_vision is present only on vision-capable models (spec §2.1).
  expect("supports_vision" in body.data[1]).toBe(false);
});

test("the official openai client lists and retrieves models unmodified", async () => {
  const client = new OpenAI({ apiKey: key, baseURL: "http://localhost/v1", fetch: (url, init) => t.app.handle(new Request(url, init)) });
  const ids: string[] = [];
  for await (const m of client.models.list()) ids.push(m.id);
  expect(ids).toEqual(["big-chat", "small-chat", "org/embed-384"]);
  const one = await client.models.retrieve("small-chat");
  expect(one.id).toBe("small-chat");
  expect(one.object).toBe("model");
  expect((one as any).max_context).toBe(16384);
});

test("the official Anthropic client lists and retrieves models in its own shapes", async () => {
  const client = new Anthropic({ apiKey: key, baseURL: "http://localhost", fetch: (url, init) => t.app.handle(new Request(url as string, init)) });
  const models: Anthropic.ModelInfo[] = [];
  for await (const m of client.models.list()) models.push(m);
  expect(models.map((m) => [m.id, m.display_name, m.type])).toEqual([
    ["big-chat", "Big Chat", "model"],
    ["small-chat", "Small Chat", "model"],
    ["org/embed-384", "Embed", "model"],
  ]);
  expect(models[1]!.max_input_tokens).toBe(16384);
  expect(Date.parse(models[0]!.created_at)).toBeGreaterThan(0);
  const one = await client.models.retrieve("small-chat");
  expect(one.display_name).toBe("Small Chat");
  const missing = await client.models.retrieve("nope").catch((e) => e);
  expect(missing).toBeInstanceOf(Anthropic.NotFoundError);
});

test("a model id containing a slash can be retrieved", async () => {
  const res = await t.request("GET", "/v1/models/org/embed-384", { key });
  expect(res.status).toBe(200);
  expect((await res.json()).kind).toBe("embedding");
});

test("every response carries a request id and the key's rate-limit state", async () => {
  const free = await t.key({ kind: "free" });
  const res = await t.request("GET", "/v1/models", { key: free });
  expect(res.headers.get("x-request-id")).toMatch(/^req_[0-9A-Za-z]{24}$/);
  expect(res.headers.get("x-ratelimit-limit-requests")).toBe("20");
  expect(res.headers.get("x-ratelimit-remaining-requests")).toBe("19");
});

test("each request is logged as one JSON line with request id, key prefix, route, status and duration", async () => {
  const res = await t.request("GET", "/v1/models/small-chat", { key });
  const id = res.headers.get("x-request-id");
  const line = t.logs.find((l) => l.request_id === id)!;
  expect(line).toMatchObject({ msg: "request", method: "GET", route: "/v1/models/*", status: 200 });
  expect(line.key).toBe(`sk-apl-…${key.slice(-4)}`);
  expect(typeof line.duration_ms).toBe("number");
  expect(JSON.stringify(t.logs)).not.toContain(key);
});

test("GET /health answers without a key", async () => {
  const res = await t.request("GET", "/health");
  expect(res.status).toBe(200);
  expect(await res.json()).toMatchObject({ status: "ok", models: 3 });
});

// Issue 42: Claude Code probes its base URL with HEAD /api/hello before a session (it answered 404).
test("HEAD and GET /api/hello answer as /health, without a key", async () => {
  const head = await t.request("HEAD", "/api/hello");
  expect(head.status).toBe(200);
  const get = await t.request("GET", "/api/hello");
  expect(get.status).toBe(200);
  expect(await get.json()).toMatchObject({ status: "ok" });
});

test("HEAD on a GET route answers as the GET would: its status, key checks included", async () => {
  expect((await t.request("HEAD", "/health")).status).toBe(200);
  expect((await t.request("HEAD", "/v1/models", { key })).status).toBe(200);
  expect((await t.request("HEAD", "/v1/models")).status).toBe(401);
  expect((await t.request("HEAD", "/v1/models/small-chat", { key })).status).toBe(200);
  expect((await t.request("HEAD", "/v1/models/nope", { key })).status).toBe(404);
});
