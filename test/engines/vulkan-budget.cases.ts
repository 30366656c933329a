import { afterAll, beforeAll, expect, test } from "bun:test";
import { ensureChatModel } from "../../models/cache";
import type { ModelManifest } from "../../src/lib/manifest";
import { chatRuntime } from "../../src/3-engines/llama/factory";
import { llamaRuntime } from "../../src/3-engines/llama/runtime";
import { memoryLogger } from "../../src/lib/log";
import { createPlanner } from "../../src/3-engines/planner/planner";
import { profileModel } from "../../src/3-engines/planner/profile";
import type { Footprint, ModelProfile } from "../../src/3-engines/planner/types";
import { chatTestApp } from "../helpers/chat";
import type { TestApp } from "../helpers/app";
import { admitLlvmpipe } from "../helpers/vulkan";
import { readRest } from "../helpers/sse";

// Issue 28's memory budget on a device that reports its memory like a GPU: Mesa's llvmpipe through
// node-llama-cpp's Vulkan build (vulkan-budget.test.ts runs this file in a process of its own).
// llvmpipe reports 2 GiB and never any use, so engines.gpu_memory_mb (the test switch) caps the
// device to room for two of three tiny chat models with every layer offloaded, and
// engines.cpu_memory_mb caps host RAM so that one model fits nowhere. Sizes come from the planner's
// own profile of the model on this runtime. llvmpipe decodes slowly: requests ask for few tokens.

let restoreEnv: () => void = () => {};
let t: TestApp;
let key: string;
let gpuBudgetMb = 0;
let cpuBudgetMb = 0;
let profile: ModelProfile;
let one: Footprint;
let layers = 0;
/** The partially offloaded model's context and slots, and the layers the planner gives it. */
let wide = { context: 0, slots: 4, gpuLayers: 0 };
/** The least "huge" lacks on vulkan:0 over every layer split, against the whole budgets. */
let hugeGpuMissingMb = 0;

const HUGE = { context: 32768, slots: 4 };
const status = (id: string) => t.deps.registry.status().find((s) => s.id === id)!;
const loaded = () => t.deps.registry.status().filter((s) => s.state === "loaded").map((s) => s.id).sort();
const chat = (model: string) => t.request("POST", "/v1/chat/completions", { key, body: { model, messages: [{ role: "user", content: "hi" }], max_tokens: 2 } });
const held = () => t.deps.registry.status().reduce((n, s) => ({ gpu: n.gpu + (s.memory_mb?.gpu ?? 0), cpu: n.cpu + (s.memory_mb?.cpu ?? 0) }), { gpu: 0, cpu: 0 });

beforeAll(async () => {
  restoreEnv = admitLlvmpipe();
  const file = await ensureChatModel("chat");
  // The runtime the app's planner and engines will share (one per process, per device and threads).
  const { llama, device } = await llamaRuntime({ device: "vulkan", threads: 1, logger: memoryLogger() });
  expect(device).toBe("vulkan");
  const manifest: ModelManifest = { id: "a", name: "m", kind: "chat", files: { model: file }, max_context: 512, slots: 1, vision: false, load: "first_use" };
  profile = await profileModel(manifest, () => file, { llama });
  layers = profile.layers;
  const fp = (gpuLayers: number, contextSize: number, slots: number) => profile.footprint({ device: gpuLayers ? "vulkan" : "cpu", gpuLayers, contextSize, slots });
  one = await fp(layers, 512, 1);
  gpuBudgetMb = Math.floor(one.gpuMb * 2.5);
  expect(2 * one.gpuMb).toBeLessThanOrEqual(gpuBudgetMb);
  expect(3 * one.gpuMb).toBeGreaterThan(gpuBudgetMb);
  // A context for "wide" that the budget holds only in part: every layer does not fit, fewer do.
  for (let c = 1024; c <= 16384 && !wide.gpuLayers; c += 256) {
    if ((await fp(layers, c, wide.slots)).gpuMb <= gpuBudgetMb) continue;
    for (let g = layers - 1; g >= 1; g--)
      if ((await fp(g, c, wide.slots)).gpuMb <= gpuBudgetMb) {
        wide = { ...wide, context: c, gpuLayers: g };
        break;
      }
  }
  expect(wide.gpuLayers).toBeGreaterThan(0);
  const wideFp = await fp(wide.gpuLayers, wide.context, wide.slots);
  // RAM for the partial model beside two others, not for "huge" anywhere.
  cpuBudgetMb = wideFp.cpuMb + 2 * one.cpuMb + 4;
  hugeGpuMissingMb = Infinity;
  for (let g = 1; g <= layers; g++) {
    const f = await fp(g, HUGE.context, HUGE.slots);
    hugeGpuMissingMb = Math.min(hugeGpuMissingMb, Math.max(f.gpuMb - gpuBudgetMb, f.cpuMb - cpuBudgetMb));
  }
  expect(hugeGpuMissingMb).toBeGreaterThan(0);
  expect((await fp(0, HUGE.context, HUGE.slots)).cpuMb).toBeGreaterThan(cpuBudgetMb); // nor on the CPU alone

  const base = { kind: "chat", files: { model: file }, name: "m", max_context: 512, slots: 1 };
  t = await chatTestApp({
    builtIn: false,
    device: "vulkan",
    engines: { gpu_memory_mb: gpuBudgetMb, cpu_memory_mb: cpuBudgetMb, keep_alive_s: -1 },
    extraModels: [
      ...["a", "b", "c"].map((id) => ({ ...base, id })),
      { ...base, id: "wide", max_context: wide.context, slots: wide.slots },
      { ...base, id: "huge", max_context: HUGE.context, slots: HUGE.slots },
      { ...base, id: "brief", keep_alive_s: 1 },
    ],
  });
  key = await t.key({ creditUsd: 5 });
}, 60_000);

afterAll(async () => {
  await t?.close();
  restoreEnv();
});

test("three models in turn under a device budget for two: each request succeeds on vulkan:0 with every layer, the least recently used idle one is unloaded", async () => {
  expect((await chat("a")).status).toBe(200);
  expect((await chat("b")).status).toBe(200);
  expect(loaded()).toEqual(["a", "b"]);
  for (const id of ["a", "b"])
    expect(status(id)).toMatchObject({ device: "vulkan:0", gpu_layers: layers, context_size: 512, slots: 1, memory_mb: { gpu: one.gpuMb, cpu: one.cpuMb } });
  // The engine's own account: every layer on llvmpipe.
  expect(await (t.deps.registry.chatEngine("a") as any).placement()).toMatchObject({ device: "vulkan", gpuLayers: layers, layers });
  expect((await chat("c")).status).toBe(200);
  expect(loaded()).toEqual(["b", "c"]); // a was the least recently used
  expect(status("c")).toMatchObject({ device: "vulkan:0", gpu_layers: layers });
  expect(t.logs.filter((l) => l.msg === "model unloaded").map((l) => [l.model, l.reason])).toEqual([["a", "to make room for c"]]);
  expect(t.logs.find((l) => l.msg === "model unloaded")!.freed_mb).toEqual({ gpu: one.gpuMb, cpu: one.cpuMb });
  expect((await chat("a")).status).toBe(200);
  expect(loaded()).toEqual(["a", "c"]); // b was
  expect(held().gpu).toBeLessThanOrEqual(gpuBudgetMb);
}, 60_000);

test("a stream in flight is never cut to make room: the model it holds stays while an idle one is unloaded", async () => {
  // c streams; a request to a then makes c the least recently used (a request's start counts as a
  // use). b then needs the room of one: a, the idle one, goes, not c. 40 tokens on llvmpipe take
  // ~1.5 s, the two requests ~0.3 s; had c's stream ended first, c would go.
  const res = await t.request("POST", "/v1/chat/completions", { key, body: { model: "c", messages: [{ role: "user", content: "a story" }], max_tokens: 40, temperature: 0, stream: true } });
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  await reader.read();
  expect((await chat("a")).status).toBe(200);
  expect(status("c").in_flight).toBe(1);
  expect((await chat("b")).status).toBe(200);
  expect(loaded()).toEqual(["b", "c"]);
  expect(t.logs.filter((l) => l.msg === "model unloaded").map((l) => [l.model, l.reason]).at(-1)).toEqual(["a", "to make room for b"]);
  const body = await readRest(reader);
  expect(body).toContain("data: [DONE]");
  expect(body).toContain('"finish_reason":"length"'); // greedy: this model and prompt never stop early
  expect(body).not.toContain('"error"');
  expect(status("c")).toMatchObject({ state: "loaded", in_flight: 0, device: "vulkan:0" });
}, 60_000);

test('a model whose every layer does not fit the device is partially offloaded ("auto" layers): the most layers the budget holds on vulkan:0, the rest in RAM', async () => {
  const res = await chat("wide");
  expect(res.status).toBe(200);
  const s = status("wide");
  const expected = await profile.footprint({ device: "vulkan", gpuLayers: wide.gpuLayers, contextSize: wide.context, slots: wide.slots });
  expect(s).toMatchObject({ state: "loaded", device: "vulkan:0", gpu_layers: wide.gpuLayers, context_size: wide.context, slots: wide.slots, memory_mb: { gpu: expected.gpuMb, cpu: expected.cpuMb } });
  expect(wide.gpuLayers).toBeLessThan(layers);
  expect(await (t.deps.registry.chatEngine("wide") as any).placement()).toMatchObject({ device: "vulkan", gpuLayers: wide.gpuLayers, layers });
  // Idle models went, least recently used first (b, then c), only as many as its room needed.
  const cStays = expected.gpuMb + one.gpuMb <= gpuBudgetMb && expected.cpuMb + one.cpuMb <= cpuBudgetMb;
  expect(loaded()).toEqual(cStays ? ["c", "wide"] : ["wide"]);
  expect(t.logs.filter((l) => l.msg === "model unloaded" && l.reason === "to make room for wide").map((l) => l.model)).toEqual(cStays ? ["b"] : ["b", "c"]);
  expect(held().gpu).toBeLessThanOrEqual(gpuBudgetMb);
  expect(held().cpu).toBeLessThanOrEqual(cpuBudgetMb);
}, 60_000);

test("a model that fits neither the device budget (in whole or in part) nor the RAM budget is a 503 naming the MB missing; the loaded ones stay", async () => {
  expect((await chat("a")).status).toBe(200);
  const before = loaded();
  const res = await chat("huge");
  expect(res.status).toBe(503);
  const e = ((await res.json()) as any).error;
  expect(e.code).toBe("model_unavailable");
  // The planner's reason for the whole budgets (every unpinned model gone), as residency asks it.
  const planner = createPlanner(t.deps.config, { logger: memoryLogger(), runtime: chatRuntime(t.deps.config, memoryLogger()) });
  const devices = await planner.devices();
  const [vk, cpu] = [devices.find((d) => d.id === "vulkan:0")!, devices.find((d) => d.id === "cpu")!];
  expect([vk.budgetMb, cpu.budgetMb]).toEqual([gpuBudgetMb, cpuBudgetMb]);
  expect(Math.min(vk.freeMb, cpu.freeMb)).toBeGreaterThan(cpuBudgetMb + gpuBudgetMb); // the budgets, not the free memory, bound it
  const manifest = t.deps.registry.manifests().find((m) => m.id === "huge")!;
  const fit = await planner.fit(await planner.profile(manifest, () => manifest.files.model!), planner.wants(manifest, devices), [{ device: vk, availableMb: gpuBudgetMb }], { device: cpu, availableMb: cpuBudgetMb }, '"huge"');
  expect(fit.ok).toBe(false);
  expect(e.message).toBe(`model "huge" cannot be loaded: ${(fit as { reason: string }).reason}`);
  const missing = Number(/([\d,]+) MB missing/.exec(e.message)?.[1]?.replace(/,/g, ""));
  expect(missing).toBeGreaterThan(0);
  expect(missing).toBeLessThanOrEqual(hugeGpuMissingMb); // at most what vulkan:0 lacks at its best split
  expect(loaded()).toEqual(before);
  expect(status("huge").state).toBe("unloaded");
}, 60_000);

test("keep_alive_s unloads an idle model from the device; the next request places it there again", async () => {
  const asked = Date.now(); // its idle time starts later, when the request ends
  expect((await chat("brief")).status).toBe(200);
  expect(status("brief")).toMatchObject({ state: "loaded", device: "vulkan:0", gpu_layers: layers, keep_alive_s: 1 });
  // The engine reads unloaded a moment before the unload's log line is written: wait for both.
  const logged = () => t.logs.some((l) => l.msg === "model unloaded" && l.model === "brief" && l.reason === "idle for 1 s (keep_alive_s)");
  while ((status("brief").state === "loaded" || !logged()) && Date.now() - asked < 4000) await Bun.sleep(25);
  expect(Date.now() - asked).toBeGreaterThanOrEqual(990); // not before its keep-alive
  expect(status("brief")).toMatchObject({ state: "unloaded", device: null, memory_mb: null });
  expect(logged()).toBe(true);
  expect((await chat("brief")).status).toBe(200);
  expect(status("brief")).toMatchObject({ state: "loaded", device: "vulkan:0" });
}, 60_000);
