import { afterAll, beforeAll, expect, test } from "bun:test";
import { ensureChatModel } from "../../models/cache";
import { chatTestApp } from "../helpers/chat";
import type { TestApp } from "../helpers/app";
import { readRest } from "../helpers/sse";

// Models on demand (issue 28) with the real llama.cpp engine on generated tiny models: a model
// not loaded is loaded by the request that needs it; an idle one is unloaded after its
// keep_alive_s; `load = "start"` pins one; a request in flight keeps its model loaded.

let t: TestApp;
let key: string;
const status = (id: string) => t.deps.registry.status().find((s) => s.id === id)!;
const chat = (model: string, max_tokens = 4) =>
  t.request("POST", "/v1/chat/completions", { key, body: { model, messages: [{ role: "user", content: "hi" }], max_tokens } });

beforeAll(async () => {
  const file = await ensureChatModel("chat");
  const m = { kind: "chat", files: { model: file }, max_context: 512, slots: 1 };
  t = await chatTestApp({
    extraModels: [
      { ...m, id: "brief", name: "Kept 1 s", keep_alive_s: 1 },
      { ...m, id: "gone", name: "Kept 0 s", keep_alive_s: 0 },
      { ...m, id: "pinned", name: "Pinned", load: "start", keep_alive_s: 0 },
    ],
  });
  await t.deps.registry.loadAtStart();
  key = await t.key({ creditUsd: 5 });
});
afterAll(() => t.close());

test("a model not loaded is loaded by the first request for it, and unloaded after keep_alive_s idle; the next request loads it again", async () => {
  expect(status("brief")).toMatchObject({ state: "unloaded", pinned: false, keep_alive_s: 1, in_flight: 0 });
  expect((await chat("brief")).status).toBe(200);
  expect(status("brief")).toMatchObject({ state: "loaded", in_flight: 0 });
  await Bun.sleep(400);
  expect(status("brief").state).toBe("loaded"); // still within its keep-alive
  expect(status("brief").idle_s).toBeGreaterThanOrEqual(0);
  await Bun.sleep(1200);
  expect(status("brief").state).toBe("unloaded");
  expect(t.logs.some((l) => l.msg === "model unloaded" && l.model === "brief" && /keep_alive_s/.test(l.reason))).toBe(true);
  expect((await chat("brief")).status).toBe(200);
  expect(status("brief").state).toBe("loaded");
}, 30_000);

test("keep_alive_s = 0 unloads a model as soon as its last request ends, not while a stream runs", async () => {
  const res = await t.request("POST", "/v1/chat/completions", { key, body: { model: "gone", messages: [{ role: "user", content: "tell a story" }], max_tokens: 40, stream: true } });
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  await reader.read(); // the stream has begun
  expect(status("gone")).toMatchObject({ state: "loaded", in_flight: 1 });
  const body = await readRest(reader);
  expect(body).toContain("[DONE]");
  for (let i = 0; i < 50 && status("gone").state !== "unloaded"; i++) await Bun.sleep(20);
  expect(status("gone")).toMatchObject({ state: "unloaded", in_flight: 0 });
}, 30_000);

test('load = "start" loads a model at start and pins it: never unloaded for idleness', async () => {
  expect(status("pinned")).toMatchObject({ state: "loaded", pinned: true, keep_alive_s: -1 });
  expect((await chat("pinned")).status).toBe(200);
  await Bun.sleep(300);
  expect(status("pinned").state).toBe("loaded");
}, 30_000);
