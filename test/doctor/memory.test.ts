import { beforeAll, expect, test } from "bun:test";
import { ensureChatModel } from "../../models/cache";
import { validateConfig, type Config } from "../../src/lib/config";
import { checkMemoryPlan } from "../../src/ops/doctor/memory";
import { systemProbes } from "../../src/ops/doctor/probes";
import { memoryLogger } from "../../src/lib/log";
import { planModels, type MemoryPlan } from "../../src/3-engines/planner/plan-all";
import { createPlanner } from "../../src/3-engines/planner/planner";
import { profileModel } from "../../src/3-engines/planner/profile";
import type { ModelManifest } from "../../src/lib/manifest";

// The memory plan `appliance doctor` shows (issue 28), with the real planner on generated tiny
// models and this machine's RAM capped by engines.cpu_memory_mb: pinned models first, then the
// others in config order on what is left; a model that fits only once idle ones are unloaded is
// loaded on demand; one that fits nowhere fails the check with the planner's reason.

let file = "";
let oneMb = 0;
const chat = (id: string, over: Record<string, unknown> = {}) => ({ id, name: id, kind: "chat", files: { model: file }, max_context: 2048, slots: 1, ...over });
const configWith = (budgetMb: number, models: Record<string, unknown>[]): Config =>
  validateConfig({ engines: { device: "cpu", threads: 1, cpu_memory_mb: budgetMb }, models });
const plan = (c: Config) => planModels(createPlanner(c, { logger: memoryLogger() }), c.models.map((m) => ({ manifest: m, file: () => file })));

beforeAll(async () => {
  file = await ensureChatModel("chat");
  const p = await profileModel(configWith(0, [chat("x")]).models[0]!, () => file);
  const f = await p.footprint({ device: "cpu", gpuLayers: 0, contextSize: 2048, slots: 1 });
  oneMb = f.cpuMb + f.gpuMb;
});

test("pinned models are placed first; the others in config order on what is left; one that fits only alone loads on demand", async () => {
  // Room for two: "late" is placed before "a" and "b" because it is pinned; "b" then fits only alone.
  const c = configWith(Math.floor(oneMb * 2.5), [chat("a"), chat("b"), chat("late", { load: "start" })]);
  const p = await plan(c);
  expect(p.models.map((m) => [m.id, m.fits, m.device])).toEqual([
    ["a", "together", "cpu"],
    ["b", "alone", "cpu"],
    ["late", "together", "cpu"],
  ]);
  expect(p.models[0]!.settings).toEqual({ device: "cpu", gpuLayers: 0, contextSize: 2048, slots: 1 });
  const check = checkMemoryPlan(p);
  expect(check.status).toBe("ok");
  const lines = check.detail.split("\n");
  expect(lines[0]).toBe("2 of 3 models fit at once; b load on demand, in turn");
  expect(lines.find((l) => l.startsWith("RAM: "))).toMatch(new RegExp(`, ${Math.floor(oneMb * 2.5).toLocaleString("en-US")} MB allowed \\(engines\\.cpu_memory_mb\\)$`));
  expect(lines).toContain(`a (chat): cpu, 2,048 tokens × 1 slot, ${oneMb.toLocaleString("en-US")} MB RAM`);
  expect(lines).toContain(`late (chat, load = start): cpu, 2,048 tokens × 1 slot, ${oneMb.toLocaleString("en-US")} MB RAM`);
  expect(lines.find((l) => l.startsWith("b (chat)"))).toEndWith("loaded on demand, unloading idle models (does not fit beside the models above)");
});

test("all models that fit at once say so; an auto context shows what the planner chose", async () => {
  const c = configWith(oneMb * 10, [chat("a"), chat("auto", { max_context: 8192, context: "auto", slots: "auto", max_slots: 2 })]);
  const p = await plan(c);
  expect(p.models.map((m) => m.fits)).toEqual(["together", "together"]);
  expect(p.models[1]!.settings).toMatchObject({ contextSize: 8192, slots: 2 });
  const check = checkMemoryPlan(p);
  expect(check).toMatchObject({ status: "ok" });
  expect(check.detail.split("\n")[0]).toBe("all 2 models fit at once");
  expect(check.detail).toContain("auto (chat): cpu, 8,192 tokens × 2 slots, ");
});

test("a model that fits nowhere fails the check with the MB missing; a pinned one is named in the hint", async () => {
  const c = configWith(oneMb * 3, [chat("a"), chat("huge", { max_context: 8192, slots: 64, load: "start" })]);
  const p = await plan(c);
  expect(p.models.map((m) => m.fits)).toEqual(["together", "refused"]);
  const check = checkMemoryPlan(p);
  expect(check.status).toBe("fail");
  expect(check.detail.split("\n")[0]).toBe("1 model of 2 cannot be loaded on this machine: huge");
  expect(check.detail).toMatch(/huge \(chat, load = start\): cannot be loaded here: "huge" needs [\d,]+ MB of RAM on the CPU with an 8,192-token context × 64 slots; [\d,]+ MB are free for it: [\d,]+ MB missing/);
  expect(check.hint).toContain('load = "first_use"');
});

test("files the planner cannot read are a warning, not a crash", async () => {
  const c = validateConfig({ engines: { device: "cpu", threads: 1 }, models: [{ ...chat("ghost"), files: { model: "/nonexistent/ghost.gguf" } }] });
  const p = await planModels(createPlanner(c, { logger: memoryLogger() }), [{ manifest: c.models[0] as ModelManifest, file: () => "/nonexistent/ghost.gguf" }]);
  expect(p.models[0]).toMatchObject({ id: "ghost", fits: "unread" });
  expect(checkMemoryPlan(p)).toMatchObject({ status: "warn" });
  expect(checkMemoryPlan({ error: "nvidia-smi hung" })).toMatchObject({ status: "warn", detail: "not worked out: nvidia-smi hung" });
});

test("a GPU placement reads as device, layers of layers, context × slots and GPU + RAM MB", () => {
  const p: MemoryPlan = {
    devices: [
      { id: "cuda:0", kind: "cuda", name: "NVIDIA GeForce RTX 4090", totalMb: 24564, freeMb: 24000, budgetMb: 24564 },
      { id: "cpu", kind: "cpu", name: "CPU", totalMb: 64000, freeMb: 60000, budgetMb: 64000 },
    ],
    models: [
      {
        id: "gemma",
        kind: "chat",
        pinned: false,
        fits: "together",
        device: "cuda:0",
        layers: 63,
        settings: { device: "cuda", gpuLayers: 40, contextSize: 32768, slots: 1 },
        footprint: { gpuMb: 23000, cpuMb: 6100, parts: { weightsMb: 0, cacheMb: 0, computeMb: 0, projectorMb: 0 } },
      },
    ],
  };
  expect(checkMemoryPlan(p).detail.split("\n")).toEqual([
    "the model fits",
    "cuda:0 (NVIDIA GeForce RTX 4090): 24,000 MB free of 24,564 MB",
    "RAM: 60,000 MB free of 64,000 MB",
    "gemma (chat): cuda:0, 40 of 63 layers, 32,768 tokens × 1 slot, 23,000 MB GPU + 6,100 MB RAM",
  ]);
});

test("the machine's probe plans the config's models from its models_dir", async () => {
  const c = configWith(0, [chat("a", { files: { model: file } })]);
  const p = await systemProbes().memoryPlan(c, false);
  expect(p.models).toMatchObject([{ id: "a", fits: "together", device: "cpu" }]);
  expect(p.devices.find((d) => d.kind === "cpu")!.totalMb).toBeGreaterThan(0);
});
