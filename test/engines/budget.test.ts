import { afterAll, beforeAll, expect, test } from "bun:test";
import { ensureChatModel } from "../../models/cache";
import { profileModel } from "../../src/3-engines/planner/profile";
import { slotCount, type ModelManifest } from "../../src/lib/manifest";
import { chatTestApp } from "../helpers/chat";
import type { TestApp } from "../helpers/app";
import { readRest } from "../helpers/sse";

// Several real models under a memory budget they cannot all fit in (issue 28), with the real
// llama.cpp engine and the real planner: the host's memory capped by engines.cpu_memory_mb (the
// test switch) to room for two of three tiny chat models. Requests to each in turn succeed; the
// least recently used idle model is unloaded; a request in flight is never cut; a model bigger than
// the budget is a 503 naming the MB missing.

let t: TestApp;
let key: string;
let budgetMb = 0;
let bigNeedsMb = 0;
const status = (id: string) => t.deps.registry.status().find((s) => s.id === id)!;
const loaded = () => t.deps.registry.status().filter((s) => s.state === "loaded").map((s) => s.id).sort();
const chat = (model: string) => t.request("POST", "/v1/chat/completions", { key, body: { model, messages: [{ role: "user", content: "hi" }], max_tokens: 3 } });

beforeAll(async () => {
  const file = await ensureChatModel("chat");
  const base = { kind: "chat" as const, files: { model: file }, slots: 1, vision: false, load: "first_use" as const, name: "m" };
  const manifests = ["a", "b", "c"].map((id) => ({ ...base, id, max_context: 2048 }));
  const big = { ...base, id: "big", max_context: 32768, slots: 4 };
  // What the planner will count for each: two fit in the budget, three do not.
  const need = async (m: Omit<ModelManifest, "price">) => {
    const p = await profileModel(m as ModelManifest, () => file);
    const f = await p.footprint({ device: "cpu", gpuLayers: 0, contextSize: m.max_context, slots: slotCount(m) });
    return f.gpuMb + f.cpuMb;
  };
  const one = await need(manifests[0]!);
  bigNeedsMb = await need(big);
  budgetMb = Math.floor(one * 2.5);
  expect(bigNeedsMb).toBeGreaterThan(budgetMb);
  t = await chatTestApp({ builtIn: false, engines: { cpu_memory_mb: budgetMb, keep_alive_s: -1 }, extraModels: [...manifests, big] });
  key = await t.key({ creditUsd: 5 });
}, 60_000);
afterAll(() => t.close());

test("three models in turn under a budget for two: each request succeeds, the least recently used idle one is unloaded", async () => {
  expect((await chat("a")).status).toBe(200);
  expect((await chat("b")).status).toBe(200);
  expect(loaded()).toEqual(["a", "b"]);
  expect(status("a").memory_mb!.cpu).toBeGreaterThan(0);
  expect((await chat("c")).status).toBe(200);
  expect(loaded()).toEqual(["b", "c"]); // a was the least recently used
  expect(t.logs.some((l) => l.msg === "model unloaded" && l.model === "a" && l.reason === "to make room for c")).toBe(true);
  expect((await chat("a")).status).toBe(200);
  expect(loaded()).toEqual(["a", "c"]);
  const held = t.deps.registry.status().reduce((n, s) => n + (s.memory_mb?.cpu ?? 0) + (s.memory_mb?.gpu ?? 0), 0);
  expect(held).toBeLessThanOrEqual(budgetMb);
}, 60_000);

test("a request in flight is never cut to make room: the model it holds stays while another is unloaded", async () => {
  // c streams (greedy, so it cannot stop early); a request to a then makes c the least recently
  // used: when b needs room, a (idle) goes all the same, not c.
  const res = await t.request("POST", "/v1/chat/completions", { key, body: { model: "c", messages: [{ role: "user", content: "a long story" }], max_tokens: 60, temperature: 0, stream: true } });
  const reader = res.body!.getReader();
  await reader.read();
  expect(status("c").in_flight).toBe(1);
  expect((await chat("a")).status).toBe(200);
  expect(status("a").last_used! >= status("c").last_used!).toBe(true);
  expect((await chat("b")).status).toBe(200);
  expect(loaded()).toEqual(["b", "c"]);
  const body = await readRest(reader);
  expect(body).toContain("data: [DONE]");
  expect(body).not.toContain('"error"');
}, 60_000);

test("a model too big for the budget is a 503 that says how many MB are missing; the loaded ones stay", async () => {
  const before = loaded();
  const res = await chat("big");
  expect(res.status).toBe(503);
  const e = ((await res.json()) as any).error;
  expect(e.code).toBe("model_unavailable");
  expect(e.message).toMatch(/"big" cannot be loaded/);
  const missing = Number(/([\d,]+) MB missing/.exec(e.message)?.[1]?.replace(/,/g, ""));
  expect(missing).toBeGreaterThan(0);
  // Missing = what it needs at its smallest allowed settings less the whole budget (nothing pinned).
  expect(missing).toBeLessThanOrEqual(bigNeedsMb - budgetMb + 1);
  expect(loaded()).toEqual(before);
}, 60_000);
