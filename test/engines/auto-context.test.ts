import { afterAll, beforeAll, expect, test } from "bun:test";
import { ensureChatModel, ensureChatModelSpec } from "../../models/cache";
import { getChatPreset } from "../../models/presets";
import type { ModelManifest } from "../../src/lib/manifest";
import { profileModel } from "../../src/3-engines/planner/profile";
import type { ModelProfile } from "../../src/3-engines/planner/types";
import { chatTestApp } from "../helpers/chat";
import type { TestApp } from "../helpers/app";

// `context = "auto"` and `slots = "auto"` (issue 28) with the real planner and llama.cpp engine on
// a generated model trained for 65,536 tokens, under a host budget (engines.cpu_memory_mb, the
// test switch): the context per slot is the longest that fits (a multiple of 256, never above the
// trained context or max_context), then as many slots as fit at it, up to max_slots; the engine
// loads with exactly that; a budget that cannot hold the shortest auto context is a 503 with the MB
// missing.

const TRAINED = 65536;
let file = "";
let profile: ModelProfile;
const needMb = async (contextSize: number, slots: number) => {
  const f = await profile.footprint({ device: "cpu", gpuLayers: 0, contextSize, slots });
  return f.cpuMb + f.gpuMb;
};
const manifest = (id: string, over: Record<string, unknown> = {}) => ({
  id,
  name: id,
  kind: "chat",
  files: { model: file },
  max_context: TRAINED,
  context: "auto",
  slots: "auto",
  max_slots: 4,
  ...over,
});

let t: TestApp;
let key: string;
let budgetMb = 0;
const apps: TestApp[] = [];
const chat = (app: TestApp, model: string) =>
  app.request("POST", "/v1/chat/completions", { key, body: { model, messages: [{ role: "user", content: "hi" }], max_tokens: 2 } });
const loadedLog = (app: TestApp, model: string) => app.logs.find((l) => l.msg === "chat model loaded" && l.model === model);

beforeAll(async () => {
  file = await ensureChatModel("long-chat");
  profile = await profileModel(manifest("probe") as unknown as ModelManifest, () => file);
  expect(profile.trainedContext).toBe(TRAINED);
  // Room for about a quarter of the trained context in one slot (MB are whole: the footprint
  // moves by one every few 256-token steps).
  budgetMb = await needMb(16384, 1);
  t = await chatTestApp({ builtIn: false, engines: { cpu_memory_mb: budgetMb }, extraModels: [manifest("auto")] });
  apps.push(t);
  key = await t.key({ creditUsd: 5 });
}, 60_000);
afterAll(async () => {
  for (const a of apps) await a.close();
});

test("an auto context is the longest multiple of 256 that fits the budget, then the most slots that fit at it; the engine loads with them", async () => {
  expect((await chat(t, "auto")).status).toBe(200);
  const s = t.deps.registry.status().find((x) => x.id === "auto")!;
  expect(s.state).toBe("loaded");
  // What fits, by scanning the same profile: the longest context in one slot, then the most slots at it.
  let context = 256;
  while (context + 256 <= TRAINED && (await needMb(context + 256, 1)) <= budgetMb) context += 256;
  let slots = 1;
  while (slots < 4 && (await needMb(context, slots + 1)) <= budgetMb) slots++;
  expect(context).toBeGreaterThanOrEqual(16384);
  expect(context).toBeLessThan(TRAINED / 2);
  expect(s).toMatchObject({ device: "cpu", context_size: context, slots });
  expect(s.memory_mb!.cpu).toBeLessThanOrEqual(budgetMb);
  // The engine's own context and slots, as llama.cpp created them.
  expect(loadedLog(t, "auto")).toMatchObject({ context_per_slot: context, slots });
}, 60_000);

test("the auto context stops at max_context (rounded down to 256), and slots go up to what fits, within max_slots", async () => {
  const roomy = await chatTestApp({
    builtIn: false,
    engines: { cpu_memory_mb: Math.ceil((await needMb(8192, 3)) + 1) },
    extraModels: [manifest("capped", { max_context: 8192 + 100, max_slots: 6 })],
  });
  apps.push(roomy);
  const k = await roomy.key({ creditUsd: 5 });
  const res = await roomy.request("POST", "/v1/chat/completions", { key: k, body: { model: "capped", messages: [{ role: "user", content: "hi" }], max_tokens: 2 } });
  expect(res.status).toBe(200);
  // max_context 8,292 rounds down to 8,192 per slot; three slots of it fit the budget, four do not.
  expect(await needMb(8192, 4)).toBeGreaterThan(Math.ceil((await needMb(8192, 3)) + 1));
  expect(roomy.deps.registry.status().find((x) => x.id === "capped")).toMatchObject({ context_size: 8192, slots: 3 });
  expect(loadedLog(roomy, "capped")).toMatchObject({ context_per_slot: 8192, slots: 3 });
}, 60_000);

test("the auto context never goes above the trained context, however much room there is", async () => {
  const big = await chatTestApp({ builtIn: false, engines: { cpu_memory_mb: (await needMb(TRAINED, 1)) * 3 }, extraModels: [manifest("trained", { max_context: TRAINED * 2, slots: 1, max_slots: undefined })] });
  apps.push(big);
  const k = await big.key({ creditUsd: 5 });
  const res = await big.request("POST", "/v1/chat/completions", { key: k, body: { model: "trained", messages: [{ role: "user", content: "hi" }], max_tokens: 2 } });
  expect(res.status).toBe(200);
  expect(big.deps.registry.status().find((x) => x.id === "trained")).toMatchObject({ context_size: TRAINED, slots: 1 });
  expect(loadedLog(big, "trained")).toMatchObject({ context_per_slot: TRAINED, slots: 1 });
}, 60_000);

test("a model trained for fewer tokens than the auto floor (4,096) gets its trained context", async () => {
  const short = await ensureChatModelSpec("trained-2k", { ...getChatPreset("chat"), name: "appliance-qwen3-trained-2k", contextLength: 2048 });
  const app = await chatTestApp({ builtIn: false, extraModels: [{ ...manifest("short"), files: { model: short }, max_context: 8192 }] });
  apps.push(app);
  const k = await app.key({ creditUsd: 5 });
  const res = await app.request("POST", "/v1/chat/completions", { key: k, body: { model: "short", messages: [{ role: "user", content: "hi" }], max_tokens: 2 } });
  expect(res.status).toBe(200);
  expect(loadedLog(app, "short")).toMatchObject({ context_per_slot: 2048 });
}, 60_000);

test("a budget below the shortest auto context (4,096 tokens, one slot) is a 503 that says how many MB are missing", async () => {
  const need = await needMb(4096, 1);
  const tight = await chatTestApp({ builtIn: false, engines: { cpu_memory_mb: need - 5 }, extraModels: [manifest("tight")] });
  apps.push(tight);
  const k = await tight.key({ creditUsd: 5 });
  const res = await tight.request("POST", "/v1/chat/completions", { key: k, body: { model: "tight", messages: [{ role: "user", content: "hi" }], max_tokens: 2 } });
  expect(res.status).toBe(503);
  const body = (await res.json()) as { error: { type: string; message: string } };
  expect(body.error.message).toContain("4,096-token context");
  expect(body.error.message).toMatch(/\b5 MB missing/);
  expect(loadedLog(tight, "tight")).toBeUndefined();
}, 60_000);
