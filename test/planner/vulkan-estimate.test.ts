import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Llama } from "node-llama-cpp";
import { ensureChatModel } from "../../models/cache";
import type { ChatPresetName } from "../../models/presets";
import { profileGguf } from "../../src/planner/gguf-profile";
import { admitLlvmpipe } from "../helpers/vulkan";

// The planner's chat-model estimates against what llama.cpp allocates on a real device: Mesa's
// llvmpipe through node-llama-cpp's Vulkan build (test/setup-vulkan.sh installs it). Each model is
// loaded with every layer offloaded and created a context as the chat engine does (chat-engine.ts
// doLoad: contextSize per sequence, sequences = slots, flash attention "auto", default batch), and
// llama.cpp's own account of the buffers it allocated on the device (its "Vulkan0 … buffer size"
// log lines: model weights, K/V cache, compute) is compared with the profile's gpuMb, both as the
// planner computes it with the runtime at hand (llama.cpp's no-alloc dry run) and without one (the
// estimate from the model's dimensions). llvmpipe's getVramState() reports no use (used stays 0:
// Mesa exposes no memory budget), so the log is the measure; the VRAM state is printed beside it.
// Runs in a process of its own, as the chat engine's Vulkan tests do (vulkan.test.ts: one llama.cpp
// build per process).

const CASES: { preset: ChatPresetName; contextSize: number; slots: number }[] = [
  { preset: "bench-64m", contextSize: 4096, slots: 1 },
  { preset: "bench-64m", contextSize: 1024, slots: 4 },
  { preset: "long-chat", contextSize: 65536, slots: 1 },
  { preset: "long-chat", contextSize: 16384, slots: 4 },
];

if (process.env.APPLIANCE_VULKAN_ESTIMATE === "1") {
  const lines: string[] = [];
  let llama: Llama;
  let restoreEnv: () => void = () => {};

  beforeAll(async () => {
    restoreEnv = admitLlvmpipe();
    const { getLlama, LlamaLogLevel } = await import("node-llama-cpp");
    llama = await getLlama({
      gpu: "vulkan",
      build: "never",
      skipDownload: true,
      progressLogs: false,
      maxThreads: 2,
      logLevel: LlamaLogLevel.info,
      logger: (_level, message) => lines.push(message),
    });
  }, 60_000);

  afterAll(async () => {
    await llama?.dispose();
    restoreEnv();
  });

  /** MiB llama.cpp allocated on the device and in host buffers, from its log lines since `from`. */
  function allocated(from: number) {
    let device = 0;
    let host = 0;
    for (const line of lines.slice(from)) {
      const m = /(\S+)\s+(?:model|KV|compute|output) buffer size =\s+([\d.]+) MiB/.exec(line);
      if (!m) continue;
      if (/^Vulkan\d+$/.test(m[1]!)) device += Number(m[2]);
      else host += Number(m[2]); // CPU_Mapped, CPU, Vulkan_Host (pinned host memory)
    }
    return { device, host };
  }

  for (const c of CASES)
    test(`${c.preset}, ${c.contextSize} tokens × ${c.slots}: the profile's GPU MB within 10% of what llama.cpp allocated`, async () => {
      const path = await ensureChatModel(c.preset);
      const withRuntime = await profileGguf(path, { llama });
      const fromShape = await profileGguf(path);
      const settings = { device: "vulkan" as const, gpuLayers: withRuntime.layers, contextSize: c.contextSize, slots: c.slots };
      const [dry, est] = await Promise.all([withRuntime.footprint(settings), fromShape.footprint(settings)]);

      const vramBefore = await llama.getVramState();
      const from = lines.length;
      const model = await llama.loadModel({ modelPath: path, gpuLayers: withRuntime.layers });
      const context = await model.createContext({ contextSize: c.contextSize, sequences: c.slots, threads: 2, flashAttention: "auto" });
      const vramAfter = await llama.getVramState();
      const got = allocated(from);
      await context.dispose();
      await model.dispose();

      expect(model.gpuLayers).toBe(withRuntime.layers);
      expect(got.device).toBeGreaterThan(0);
      const error = (mb: number) => (100 * (mb - got.device)) / got.device;
      console.log(
        `vulkan-estimate: ${c.preset} ctx ${c.contextSize} × ${c.slots}: allocated ${got.device.toFixed(2)} MiB on the device (+${got.host.toFixed(2)} MiB host); ` +
          `dry run ${dry.gpuMb} MB (${error(dry.gpuMb).toFixed(1)}%), from dimensions ${est.gpuMb} MB (${error(est.gpuMb).toFixed(1)}%); ` +
          `host ${dry.cpuMb} / ${est.cpuMb} MB; getVramState used ${vramBefore.used} → ${vramAfter.used}`,
      );
      expect(Math.abs(error(dry.gpuMb))).toBeLessThanOrEqual(10);
      expect(Math.abs(error(est.gpuMb))).toBeLessThanOrEqual(10);
      // host buffers are a few MB here: whole-MB rounding of each part dominates
      expect(Math.abs(dry.cpuMb - got.host)).toBeLessThanOrEqual(Math.max(3, got.host * 0.1));
    }, 60_000);
} else {
  test("the planner's estimates match llama.cpp's allocations on llvmpipe (in a process of its own)", async () => {
    const child = Bun.spawn([process.execPath, "test", import.meta.path], {
      env: { ...process.env, APPLIANCE_VULKAN_ESTIMATE: "1" },
      stdout: "pipe",
      stderr: "pipe",
    });
    const [out, err, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
    const report = `${out}\n${err}`;
    for (const line of report.split("\n")) if (line.startsWith("vulkan-estimate:")) console.log(line);
    expect({ code, report: code === 0 ? "" : report.slice(-6000) }).toEqual({ code: 0, report: "" });
    expect(report).toMatch(new RegExp(`\\b${CASES.length} pass\\b`));
    expect(report).toMatch(/\b0 fail\b/);
  }, 300_000);
}

