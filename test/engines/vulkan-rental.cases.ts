import { afterAll, beforeAll, expect, test } from "bun:test";
import { ensureChatModel } from "../../models/cache";
import type { ModelManifest } from "../../src/lib/manifest";
import { llamaRuntime } from "../../src/3-engines/llama/runtime";
import { memoryLogger } from "../../src/lib/log";
import { profileModel } from "../../src/3-engines/planner/profile";
import type { DiscoveredGpu } from "../../src/2-services/rentals/inventory";
import { FAKE_JUPYTER, getRental, nodeIds, until } from "../api/rentals/setup";
import { chatTestApp } from "../helpers/chat";
import type { TestApp } from "../helpers/app";
import { admitLlvmpipe } from "../helpers/vulkan";
import { readRest } from "../helpers/sse";

// A GPU shared between inference and rentals (issue 28), end to end on Mesa's llvmpipe through
// node-llama-cpp's Vulkan build (vulkan-rental.test.ts runs this file in a process of its own): the
// rental inventory discovers one GPU under the Vulkan device's name, as nvidia-smi would list the
// card a Vulkan driver drives, so the planner's device "vulkan:0" is that GPU (deviceGpus matches
// by name). The real process launcher runs the stand-in notebook (test/fixtures/rentals/).
// engines.cpu_memory_mb leaves "m" room in RAM beside its layers on the device, not on the CPU
// alone: while the GPU is rented it has nowhere to go. "c" is placed on the CPU (device = "cpu")
// inside the Vulkan runtime, where llama.cpp still computes its prompts on the GPU: the planner
// books its compute buffer there, so for rentals it is on the GPU too.

let restoreEnv: () => void = () => {};
let deviceName = "";
let layers = 0;
let cpuBudgetMb = 0;
let context = 0;
/** What "c" holds on the device though placed on the CPU; what "m" holds there. */
let cGpuMb = 0;
let mGpuMb = 0;
let t: TestApp;
let user: string;
let renter: string;

const GPU_UUID = "GPU-00000000-0000-4000-8000-0000000000a1";
const discovered = (name: string): DiscoveredGpu[] => [{ uuid: GPU_UUID, name, vram_mb: 2048, compute_cap: 8.9, index: 0 }];
const status = (app: TestApp, id: string) => app.deps.registry.status().find((s) => s.id === id)!;
const chat = (app: TestApp, key: string, model: string) =>
  app.request("POST", "/v1/chat/completions", { key, body: { model, messages: [{ role: "user", content: "hi" }], max_tokens: 2 } });

async function rentalApp(shareGpus: boolean): Promise<TestApp> {
  const file = await ensureChatModel("chat");
  const app = await chatTestApp({
    builtIn: false,
    device: "vulkan",
    discoveredGpus: discovered(deviceName),
    engines: { cpu_memory_mb: cpuBudgetMb, keep_alive_s: -1 },
    extraModels: [
      { id: "m", name: "m", kind: "chat", files: { model: file }, max_context: context, slots: 1 },
      { id: "c", name: "c", kind: "chat", device: "cpu", files: { model: file }, max_context: 512, slots: 1 },
    ],
    config: {
      rentals: {
        share_gpus: shareGpus,
        discover: false,
        price_per_hour: 0.6,
        country: "Germany",
        country_code: "DE",
        launcher: "process",
        access: "direct",
        process: { command: [process.execPath, FAKE_JUPYTER], bind: "127.0.0.1" },
        public_host: "127.0.0.1",
        ready_timeout_s: 20,
      },
    },
  });
  await app.deps.rentals.start();
  return app;
}

beforeAll(async () => {
  restoreEnv = admitLlvmpipe();
  // The device's name as the planner reads it (src/3-engines/planner/devices.ts), from the runtime the app shares.
  const { llama } = await llamaRuntime({ device: "vulkan", threads: 1, logger: memoryLogger() });
  deviceName = (await llama.getGpuDeviceNames()).join(" + ");
  expect(deviceName).toMatch(/^llvmpipe/);
  const file = await ensureChatModel("chat");
  const manifest: ModelManifest = { id: "m", name: "m", kind: "chat", files: { model: file }, max_context: 512, slots: 1, vision: false, load: "first_use" };
  const profile = await profileModel(manifest, () => file, { llama });
  layers = profile.layers;
  const fp = (gpuLayers: number, contextSize: number) => profile.footprint({ device: gpuLayers ? "vulkan" : "cpu", gpuLayers, contextSize, slots: 1 });
  const c = await fp(0, 512);
  cGpuMb = c.gpuMb;
  expect(cGpuMb).toBeGreaterThan(0);
  // A context for "m" whose RAM on the CPU alone is more than beside every layer on the device
  // (and "c"); the budget between.
  for (let ctx = 4096; ctx <= 65536 && !context; ctx += 256) {
    const budget = (await fp(0, ctx)).cpuMb - 1;
    const m = await fp(layers, ctx);
    if (m.cpuMb + c.cpuMb <= budget) [context, cpuBudgetMb, mGpuMb] = [ctx, budget, m.gpuMb];
  }
  expect(context).toBeGreaterThan(0);
  t = await rentalApp(true);
  user = await t.key({ creditUsd: 5 });
  renter = await t.key({ account: "renter", creditUsd: 5, scopes: ["inference", "rental"] });
}, 60_000);

afterAll(async () => {
  await t?.close();
  restoreEnv();
});

test("share_gpus: a rental on the GPU idle models hold unloads them first; meanwhile a request for one is a 503 naming the rental; after it the model is placed on the GPU again", async () => {
  expect((await chat(t, user, "m")).status).toBe(200);
  expect(status(t, "m")).toMatchObject({ state: "loaded", device: "vulkan:0", gpu_layers: layers, in_flight: 0 });
  expect((await chat(t, user, "c")).status).toBe(200);
  expect(status(t, "c")).toMatchObject({ state: "loaded", device: "cpu", gpu_layers: 0, memory_mb: { gpu: cGpuMb }, in_flight: 0 });
  // Held only by idle on-demand models: the GPU is listed free.
  const gpus = (await (await t.request("GET", "/api/v1/gpus", { key: renter })).json()) as any;
  expect(gpus.data.map((g: any) => g.gpu_model)).toEqual([deviceName]);
  const nodeId = gpus.data[0].node_id;

  const created = await t.request("POST", "/api/v1/rentals", { key: renter, body: { node_id: nodeId, type: "jupyter" } });
  expect(created.status).toBe(200);
  const rental = (await created.json()) as any;
  const running = await until(() => getRental(t, renter, rental.rental_id), (r) => r.status !== "pending");
  expect(running.status).toBe("running");
  // Both models were unloaded before the notebook server started, for that reason.
  const launchedAt = t.logs.findIndex((l) => l.msg === "rental launched" && l.rental === rental.rental_id);
  for (const [id, gpu] of [["m", mGpuMb], ["c", cGpuMb]] as const) {
    const unloadedAt = t.logs.findIndex((l) => l.msg === "model unloaded" && l.model === id);
    expect(t.logs[unloadedAt]).toMatchObject({ reason: "its GPU is being rented", freed_mb: { gpu } });
    expect(unloadedAt).toBeLessThan(launchedAt);
    expect(status(t, id)).toMatchObject({ state: "unloaded", device: null });
  }
  // The notebook server was handed that GPU.
  const lab = (await (await fetch(running.connection.url)).json()) as any;
  expect(lab.gpus).toBe(GPU_UUID);
  expect(await nodeIds(t, renter)).toEqual([]);

  // While it runs "m" has nowhere to go (the RAM budget does not hold it on the CPU alone, and a CPU
  // placement needs the GPU too): a 503 that names the rental.
  const refused = await chat(t, user, "m");
  expect(refused.status).toBe(503);
  expect(refused.headers.get("retry-after")).toBe("60");
  const e = ((await refused.json()) as any).error;
  expect(e.code).toBe("model_unavailable");
  expect(e.message).toStartWith('model "m" cannot be loaded: "m" needs ');
  expect(e.message).toMatch(/ MB missing; /);
  expect(e.message).toEndWith(` (not usable now: vulkan:0 (${deviceName}) is rented (${rental.rental_id}))`);
  expect(status(t, "m")).toMatchObject({ state: "unloaded", device: null });
  // "c" fits in RAM, but its CPU placement needs the runtime's GPU for its prompts.
  const alsoRefused = await chat(t, user, "c");
  expect(alsoRefused.status).toBe(503);
  expect(((await alsoRefused.json()) as any).error.message).toEndWith(` (not usable now: vulkan:0 (${deviceName}) is rented (${rental.rental_id}))`);
  expect(status(t, "c").state).toBe("unloaded");

  const stopped = await t.request("DELETE", `/api/v1/rentals/${rental.rental_id}`, { key: renter });
  expect(((await stopped.json()) as any).status).toBe("stopped");
  expect(await nodeIds(t, renter)).toEqual([nodeId]);

  // After it, the next request places the model on the device again, every layer.
  expect((await chat(t, user, "m")).status).toBe(200);
  expect(status(t, "m")).toMatchObject({ state: "loaded", device: "vulkan:0", gpu_layers: layers, context_size: context });
  expect(await (t.deps.registry.chatEngine("m") as any).placement()).toMatchObject({ device: "vulkan", gpuLayers: layers });
  expect(t.logs.filter((l) => l.msg === "model unloaded").map((l) => [l.model, l.reason])).toEqual([
    ["m", "its GPU is being rented"],
    ["c", "its GPU is being rented"],
  ]);
}, 60_000);

test("share_gpus: while a request streams on a model on the GPU, or holds one placed on the CPU, the GPU is neither listed free nor rentable; once it ends it is", async () => {
  expect(status(t, "m")).toMatchObject({ state: "loaded", device: "vulkan:0" });
  const [nodeId] = await nodeIds(t, renter);
  expect(nodeId).toBeString();
  // 40 tokens on llvmpipe take ~1.5 s; the two calls below a few ms.
  const res = await t.request("POST", "/v1/chat/completions", { key: user, body: { model: "m", messages: [{ role: "user", content: "a story" }], max_tokens: 40, temperature: 0, stream: true } });
  const reader = res.body!.getReader();
  await reader.read();
  expect(status(t, "m").in_flight).toBe(1);
  expect(await nodeIds(t, renter)).toEqual([]);
  const refused = await t.request("POST", "/api/v1/rentals", { key: renter, body: { node_id: nodeId, type: "jupyter" } });
  expect(((await refused.json()) as any).error).toMatchObject({ code: "node_unavailable", message: expect.stringContaining("it is not offered (reserved") });
  const body = await readRest(reader);
  expect(body).toContain("data: [DONE]");
  expect(body).toContain('"finish_reason":"length"'); // greedy: this model and prompt never stop early
  expect(status(t, "m")).toMatchObject({ state: "loaded", device: "vulkan:0", in_flight: 0 });
  expect(await nodeIds(t, renter)).toEqual([nodeId!]);

  // A request holding "c" (on the CPU, its prompts on the GPU), as the chat service holds it.
  const held = await t.deps.registry.use("c", "chat");
  expect(status(t, "c")).toMatchObject({ state: "loaded", device: "cpu", memory_mb: { gpu: cGpuMb }, in_flight: 1 });
  expect(await nodeIds(t, renter)).toEqual([]);
  held.release();
  expect(status(t, "c").in_flight).toBe(0);
  expect(await nodeIds(t, renter)).toEqual([nodeId!]);
}, 60_000);

test("without share_gpus the GPU is not listed free, nor rentable, while a model is loaded on it (or on the CPU inside its runtime), idle or not", async () => {
  const app = await rentalApp(false);
  try {
    const key = await app.key({ account: "renter", creditUsd: 5, scopes: ["inference", "rental"] });
    const [nodeId] = await nodeIds(app, key);
    expect(nodeId).toBeString();
    expect((await chat(app, key, "m")).status).toBe(200);
    expect(status(app, "m")).toMatchObject({ state: "loaded", device: "vulkan:0", in_flight: 0 });
    expect(await nodeIds(app, key)).toEqual([]);
    const refused = await app.request("POST", "/api/v1/rentals", { key, body: { node_id: nodeId, type: "jupyter" } });
    expect(((await refused.json()) as any).error.code).toBe("node_unavailable");
    expect(status(app, "m").state).toBe("loaded");
    expect(await app.deps.registry.adminUnload("m")).toBe("unloaded");
    expect(await nodeIds(app, key)).toEqual([nodeId!]);
    // Nor while one placed on the CPU is loaded: its prompts run on the GPU.
    expect((await chat(app, key, "c")).status).toBe(200);
    expect(status(app, "c")).toMatchObject({ state: "loaded", device: "cpu", memory_mb: { gpu: cGpuMb }, in_flight: 0 });
    expect(await nodeIds(app, key)).toEqual([]);
    expect(await app.deps.registry.adminUnload("c")).toBe("unloaded");
    expect(await nodeIds(app, key)).toEqual([nodeId!]);
  } finally {
    await app.close();
  }
}, 60_000);
