import { afterAll, expect, test } from "bun:test";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { ensureChatModel } from "../../models/cache";
import { expectPassed, runTestFile } from "../helpers/own-process";
import { catalogue, isDownload, modelFolder, type DownloadEntry } from "../../models/catalogue";
import { writeRealModel } from "../../models/gguf/real-archs";
import type { ChatPresetName } from "../../models/presets";
import { profileGguf } from "../../src/3-engines/planner/gguf-profile";
import { llvmpipeForTests } from "../helpers/vulkan";
import { tempFolder } from "../models/llama";

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
//
// A model placed on the CPU (gpuLayers 0) in this GPU runtime still has a device compute buffer:
// ggml runs a prompt's operations on the GPU, copying the weights and K/V over (gguf-profile.ts).
// Those cases compare the CPU placement's gpuMb with it, the dimensions' estimate within 20% (seen:
// -8.8% to +18%; the dry run within 5%).
//
// qwen3-1.7b's real shapes (a sparse file, models/gguf/real-archs.ts) have tensors over llvmpipe's
// 128 MiB limit: llama.cpp keeps its 243 MiB output.weight in RAM and computes the 297 MiB of
// logits on the CPU; the profile does the same. Its host side with every layer offloaded is not
// compared: llama.cpp's CPU_Mapped line then spans the whole mapped file (token_embd at its start,
// output.weight at its end), which holds RAM only where pages are read.

type Case = { preset: ChatPresetName | "qwen3-1.7b"; contextSize: number; slots: number; cpu?: true };
const CASES: Case[] = [
  { preset: "bench-64m", contextSize: 4096, slots: 1 },
  { preset: "bench-64m", contextSize: 1024, slots: 4 },
  { preset: "long-chat", contextSize: 65536, slots: 1 },
  { preset: "long-chat", contextSize: 16384, slots: 4 },
  { preset: "bench-64m", contextSize: 4096, slots: 1, cpu: true },
  { preset: "bench-64m", contextSize: 1024, slots: 4, cpu: true },
  { preset: "long-chat", contextSize: 65536, slots: 1, cpu: true },
  { preset: "long-chat", contextSize: 16384, slots: 4, cpu: true },
  { preset: "qwen3-1.7b", contextSize: 4096, slots: 1 },
  { preset: "qwen3-1.7b", contextSize: 4096, slots: 1, cpu: true },
];

const tmp = tempFolder("vulkan-estimate-");
/** A preset's generated GGUF, or a catalogue model's real header and tensor table written sparse. */
async function modelPath(preset: Case["preset"]): Promise<string> {
  if (preset !== "qwen3-1.7b") return ensureChatModel(preset);
  const e = catalogue().find((e): e is DownloadEntry => e.id === preset && isDownload(e))!;
  const dir = join(tmp.dir, modelFolder(e));
  mkdirSync(dir, { recursive: true });
  return writeRealModel(preset, dir, e.files).model!.path;
}

if (process.env.APPLIANCE_VULKAN_ESTIMATE === "1") {
  const vk = llvmpipeForTests();
  const lines = vk.lines;
  afterAll(() => tmp.remove());

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
    test(`${c.preset}, ${c.contextSize} tokens × ${c.slots}${c.cpu ? " on the CPU" : ""}: the profile's GPU MB within ${c.cpu ? 20 : 10}% of what llama.cpp allocated`, async () => {
      const llama = vk.llama();
      const path = await modelPath(c.preset);
      const withRuntime = await profileGguf(path, { llama });
      const fromShape = await profileGguf(path, { llama, dryRun: false });
      const gpuLayers = c.cpu ? 0 : withRuntime.layers;
      const settings = { device: c.cpu ? ("cpu" as const) : ("vulkan" as const), gpuLayers, contextSize: c.contextSize, slots: c.slots };
      const [dry, est] = await Promise.all([withRuntime.footprint(settings), fromShape.footprint(settings)]);

      const vramBefore = await llama.getVramState();
      const from = lines.length;
      const model = await llama.loadModel({ modelPath: path, gpuLayers });
      const context = await model.createContext({ contextSize: c.contextSize, sequences: c.slots, threads: 2, flashAttention: "auto" });
      const vramAfter = await llama.getVramState();
      const got = allocated(from);
      await context.dispose();
      await model.dispose();

      expect(model.gpuLayers).toBe(gpuLayers);
      expect(got.device).toBeGreaterThan(0);
      const error = (mb: number) => (100 * (mb - got.device)) / got.device;
      console.log(
        `vulkan-estimate: ${c.preset} ctx ${c.contextSize} × ${c.slots}${c.cpu ? " (gpuLayers 0)" : ""}: allocated ${got.device.toFixed(2)} MiB on the device (+${got.host.toFixed(2)} MiB host); ` +
          `dry run ${dry.gpuMb} MB (${error(dry.gpuMb).toFixed(1)}%), from dimensions ${est.gpuMb} MB (${error(est.gpuMb).toFixed(1)}%); ` +
          `host ${dry.cpuMb} / ${est.cpuMb} MB; getVramState used ${vramBefore.used} → ${vramAfter.used}`,
      );
      expect(Math.abs(error(dry.gpuMb))).toBeLessThanOrEqual(10);
      expect(Math.abs(error(est.gpuMb))).toBeLessThanOrEqual(c.cpu ? 20 : 10);
      // host buffers are a few MB here: whole-MB rounding of each part dominates
      if (c.preset !== "qwen3-1.7b" || c.cpu) expect(Math.abs(dry.cpuMb - got.host)).toBeLessThanOrEqual(Math.max(3, got.host * 0.1));
      if (c.cpu) expect(withRuntime).toMatchObject({ runtimeGpu: "vulkan" });
    }, 60_000);
} else {
  test("the planner's estimates match llama.cpp's allocations on llvmpipe (in a process of its own)", async () => {
    const run = await runTestFile(import.meta.path, { APPLIANCE_VULKAN_ESTIMATE: "1" });
    for (const line of run.report.split("\n")) if (line.startsWith("vulkan-estimate:")) console.log(line);
    expectPassed(run, CASES.length);
  }, 300_000);
}

