import { expect, test } from "bun:test";
import { ensureChatModelSpec } from "../../models/cache";
import type { ChatModelSpec } from "../../models/presets";
import { discoverDevices } from "../../src/3-engines/planner/devices";
import { fitModel } from "../../src/3-engines/planner/fit";
import { profileGguf } from "../../src/3-engines/planner/gguf-profile";
import type { DeviceInfo, LoadWants } from "../../src/3-engines/planner/types";
import { expectPassed, runTestFile } from "../helpers/own-process";
import { admitLlvmpipe, llvmpipeForTests } from "../helpers/vulkan";

// A Vulkan device's largest tensor as a constraint of the fit, on Mesa's llvmpipe through
// node-llama-cpp's Vulkan build (test/setup-vulkan.sh). The model has one block of 8 KV heads of
// 128 (2 KiB of K a token, as qwen3-1.7b) and a trained context of 128k tokens: its K at 128k is
// 256 MiB, twice the 128 MiB llvmpipe's maxStorageBufferRange allows, and llama.cpp aborts the
// process on such a cache. The planner reads the limit from the Vulkan loader (devices.ts), and an
// auto context stops at 64k × 1 slot; a context of 64k + 256 aborts a process of its own, which
// shows the limit is the device's and not a margin of ours. Each run is a process of its own (one
// llama.cpp build a process; the abort takes its process down).
//
// The model is loaded without node-llama-cpp's memory checks (`ignoreMemorySafetyChecks`, and
// `useMmap` given, which "auto" would otherwise decide by more dry runs): with them, loadModel
// dry-runs contexts up to the model's trained one to size its own guess, and that alone aborts
// the process for this model whatever context is asked next (the third run shows it). A planned
// load has its settings already: the chat engine must load planned settings that way too.

const SPEC: ChatModelSpec = {
  name: "appliance-qwen3-wide-kv",
  contextLength: 131_072,
  embedding: 1024,
  blocks: 1,
  heads: 8,
  kvHeads: 8,
  headDim: 128,
  feedForward: 1024,
  vocabSize: 2048,
  matrixType: "f16",
  seed: 3,
};
const MiB = 2 ** 20;
const LIMIT_CONTEXT = 65_536; // 65,536 × 8 × 128 × 2 bytes = 128 MiB

/** How a load with planned settings must call loadModel (see above). */
const PLANNED = { ignoreMemorySafetyChecks: true, useMmap: true } as const;

const mode = process.env.APPLIANCE_VULKAN_LIMIT;

if (mode === "fit") {
  const vk = llvmpipeForTests();
  const lines = vk.lines;

  test("an auto context on llvmpipe stops at the largest K its storage buffers hold, and loads", async () => {
    const llama = vk.llama();
    const path = await ensureChatModelSpec("wide-kv", SPEC);
    const { devices } = await discoverDevices({ cuda: false, llama });
    const device = devices.find((d) => d.kind === "vulkan") as DeviceInfo;
    expect(device.maxTensorBytes).toBe(128 * MiB);

    const profile = await profileGguf(path, { llama });
    const wants: LoadWants = { devices: ["vulkan"], gpuLayers: "auto", contextSize: "auto", slots: "auto", maxContext: 131_072, maxSlots: 4, minContext: 4096 };
    const fit = await fitModel(profile, wants, [{ device, availableMb: 16_384 }], { device: devices[0]!, availableMb: 16_384 }, "wide-kv");
    expect(fit).toMatchObject({ ok: true, device: "vulkan:0", settings: { device: "vulkan", gpuLayers: profile.layers, contextSize: LIMIT_CONTEXT, slots: 1 } });
    if (!fit.ok) return;

    // as the chat engine loads it (chat-engine.ts doLoad)
    const from = lines.length;
    const model = await llama.loadModel({ modelPath: path, gpuLayers: fit.settings.gpuLayers, ...PLANNED });
    const context = await model.createContext({ contextSize: fit.settings.contextSize, sequences: fit.settings.slots, threads: 2, flashAttention: "auto" });
    const kv = lines.slice(from).find((l) => /Vulkan0 KV buffer size/.test(l));
    await context.dispose();
    await model.dispose();
    expect(kv).toMatch(/Vulkan0 KV buffer size =\s+256\.00 MiB/); // K and V, 128 MiB each
  }, 120_000);
} else if (mode === "server") {
  test("the server loads the model with context and slots auto on llvmpipe: 64k × 1, no abort", async () => {
    const restore = admitLlvmpipe();
    const { chatTestApp } = await import("../helpers/chat");
    const path = await ensureChatModelSpec("wide-kv", SPEC);
    const t = await chatTestApp({
      device: "vulkan",
      builtIn: false,
      extraModels: [{ id: "wide", name: "Wide", kind: "chat", files: { model: path }, max_context: 131_072, context: "auto", slots: "auto" }],
    });
    try {
      const key = await t.key({ creditUsd: 5 });
      const res = await t.request("POST", "/v1/chat/completions", { key, body: { model: "wide", messages: [{ role: "user", content: "hi" }], max_tokens: 2 } });
      expect(res.status).toBe(200);
      expect(t.deps.registry.status().find((s) => s.id === "wide")).toMatchObject({ device: "vulkan:0", context_size: LIMIT_CONTEXT, slots: 1 });
      expect(t.logs.find((l) => l.msg === "chat model loaded" && l.model === "wide")).toMatchObject({ device: "vulkan", context_per_slot: LIMIT_CONTEXT, slots: 1 });
    } finally {
      await t.close();
      restore();
    }
  }, 120_000);
} else if (mode === "over" || mode === "checks") {
  test(mode === "over" ? "one step over the limit: llama.cpp aborts" : "node-llama-cpp's memory checks dry-run the trained context: llama.cpp aborts", async () => {
    admitLlvmpipe();
    const { getLlama, LlamaLogLevel } = await import("node-llama-cpp");
    const llama = await getLlama({ gpu: "vulkan", build: "never", skipDownload: true, progressLogs: false, maxThreads: 2, logLevel: LlamaLogLevel.error });
    const model = await llama.loadModel({ modelPath: await ensureChatModelSpec("wide-kv", SPEC), gpuLayers: 2, ...(mode === "over" ? PLANNED : {}) });
    await model.createContext({ contextSize: mode === "over" ? LIMIT_CONTEXT + 256 : 4096, sequences: 1, threads: 2, flashAttention: "auto" });
    console.log("vulkan-limit: loaded");
  }, 120_000);
} else {
  const run = (mode: string) => runTestFile(import.meta.path, { APPLIANCE_VULKAN_LIMIT: mode });

  test("the fitter's auto context for a long-context model loads on llvmpipe without aborting (in a process of its own)", async () => {
    expectPassed(await run("fit"), 1);
  }, 300_000);

  test("the server plans and loads that model with context and slots auto through the chat engine (in a process of its own)", async () => {
    expectPassed(await run("server"), 1);
  }, 300_000);

  const aborts = {
    over: "256 tokens more than that context abort the process that loads it: the limit is the device's own",
    checks: "with node-llama-cpp's memory checks on, even a 4k context aborts: its checks dry-run the trained 128k",
  };
  for (const [which, title] of Object.entries(aborts))
    test(title, async () => {
      const { code, report } = await run(which);
      expect(code).not.toBe(0);
      expect(report).toContain("pre-allocated tensor (cache_k_l0) in a buffer (Vulkan0)");
      expect(report).not.toContain("vulkan-limit: loaded");
    }, 300_000);
}
