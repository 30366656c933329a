import { expect, test } from "bun:test";
import { ensureDiffusionModel } from "../../models/diffusion/cache";
import { validateConfig } from "../../src/lib/config";
import { memoryLogger } from "../../src/lib/log";
import { createPlanner, wantsOf } from "../../src/3-engines/planner/planner";
import type { DeviceInfo } from "../../src/3-engines/planner/types";

// What each manifest asks of the planner (wantsOf), and the real planner's choice from it: a chat
// model's context is the manifest's or auto; an image model is planned at the largest image a
// request may ask for, not at its max_context (the prompt's tokens).

const CPU: DeviceInfo = { id: "cpu", kind: "cpu", name: "host", totalMb: 64000, freeMb: 60000, budgetMb: 64000 };
const models = (list: Record<string, unknown>[]) => validateConfig({ engines: { device: "cpu", threads: 1 }, models: list }).models;
const base = { name: "m", files: { model: "m" } };

test("chat: a fixed context by default, the planner's choice for auto; image: auto (the largest side); embeddings: max_context", () => {
  const [fixed, auto, image, embed] = models([
    { ...base, id: "fixed", kind: "chat", max_context: 8192, slots: 2 },
    { ...base, id: "auto", kind: "chat", max_context: 32768, context: "auto", slots: "auto", max_slots: 3 },
    { ...base, id: "img", kind: "image", max_context: 77 },
    { ...base, id: "emb", kind: "embedding", max_context: 512 },
  ]);
  expect(wantsOf(fixed!, "cpu", [CPU])).toMatchObject({ devices: ["cpu"], contextSize: 8192, slots: 2, maxContext: 8192, maxSlots: 2 });
  expect(wantsOf(auto!, "cpu", [CPU])).toMatchObject({ contextSize: "auto", slots: "auto", maxContext: 32768, maxSlots: 3, minContext: 4096 });
  expect(wantsOf(image!, "cpu", [CPU])).toMatchObject({ devices: ["cpu"], contextSize: "auto", slots: 1 });
  expect(wantsOf(embed!, "cpu", [CPU])).toMatchObject({ contextSize: 512, slots: 1 });
});

test("the planner books an image model at the largest image a request may ask for", async () => {
  const dir = await ensureDiffusionModel("diffusion-turbo");
  const config = validateConfig({ engines: { device: "cpu", threads: 1 }, models: [{ id: "img", name: "img", kind: "image", files: { model: dir }, max_context: 77 }] });
  const planner = createPlanner(config, { logger: memoryLogger() });
  const m = config.models[0]!;
  const profile = await planner.profile(m, () => dir);
  const devices = await planner.devices();
  const cpu = devices.find((d) => d.kind === "cpu")!;
  const fit = await planner.fit(profile, planner.wants(m, devices), [], { device: cpu, availableMb: 1e6 }, "img");
  expect(profile.trainedContext).toBe(1536);
  expect(fit).toMatchObject({ ok: true, device: "cpu", settings: { contextSize: 1536, slots: 1 } });
  const small = await profile.footprint({ device: "cpu", gpuLayers: 0, contextSize: 77, slots: 1 });
  if (fit.ok) expect(fit.footprint.cpuMb).toBeGreaterThan(small.cpuMb * 2);
});
