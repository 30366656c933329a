import { afterAll, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { ensureOnnxModel } from "../../../models/onnx/cache";
import { validateConfig } from "../../../src/lib/config";
import { DeviceUnavailableError, probeWebGpu } from "../../../src/3-engines/onnx-device";
import { TransformersEmbeddingEngine } from "../../../src/3-engines/transformers/embedding-engine";
import { memoryLogger } from "../../../src/lib/log";
import { startServer } from "../../../src/main";
import { tempDir } from "../../helpers/app";

// device = "webgpu" on a host without a WebGPU adapter. This machine has none (Dawn refuses
// Debian's llvmpipe, platform notes), so the refusal is real: ONNX Runtime's WebGPU provider is
// asked for an adapter and finds none. The success path needs a real GPU and is not tested here.

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

const noAdapter = await probeWebGpu();

test.skipIf(noAdapter === null)("the probe finds no adapter here, in Dawn's words", () => {
  expect(noAdapter).toStartWith("Failed to get a WebGPU adapter");
});

test.skipIf(noAdapter === null)("the engine refuses the load with the reason and the fix; nothing falls back to the CPU", async () => {
  const logger = memoryLogger();
  const folder = await ensureOnnxModel("embed");
  const e = new TransformersEmbeddingEngine({ modelId: "gpu-embed", folder, device: "webgpu", threads: 1, callTokens: 256, logger });
  const err = await e.load().catch((x) => x);
  expect(err).toBeInstanceOf(DeviceUnavailableError);
  expect(err.code).toBe("model_unavailable");
  expect(err.message).toBe(`embedding model "gpu-embed" cannot load: no WebGPU adapter found: ${noAdapter}; set device = "cpu" or "cuda" in its manifest`);
  expect(e.loaded).toBe(false);
  expect(logger.lines.some((l) => l.msg === "embedding model loaded")).toBe(false);
});

test.skipIf(noAdapter === null)("through the server: the start goes on, the webgpu model answers 503 with the reason, the other model serves", async () => {
  const dir = tempDir();
  dirs.push(dir);
  const folder = await ensureOnnxModel("embed");
  const model = { name: "Tiny embed", kind: "embedding", files: { model: folder }, max_context: 512, load: "start" };
  const config = validateConfig({
    server: { data_dir: dir, port: 0 },
    engines: { device: "cpu", threads: 1 },
    models: [
      { ...model, id: "gpu-embed", device: "webgpu" },
      { ...model, id: "cpu-embed" },
    ],
  });
  const logger = memoryLogger();
  const banner: string[] = [];
  const s = await startServer(config, { logger, banner: (l) => banner.push(l) });
  try {
    const key = /sk-apl-[0-9A-Za-z]{44}/.exec(banner.join("\n"))![0];
    const embed = (model: string) =>
      fetch(`${s.url}/v1/embeddings`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ model, input: "hello", encoding_format: "float" }),
      });
    const refused = await embed("gpu-embed");
    expect(refused.status).toBe(503);
    const body = await refused.json();
    expect(body.error.code).toBe("model_unavailable");
    expect(body.error.message).toContain(`embedding model "gpu-embed" cannot load: no WebGPU adapter found: `);
    expect(body.error.message).toEndWith(`; set device = "cpu" or "cuda" in its manifest`);
    // Asked again: the same refusal (the probe is not repeated), logged once.
    expect((await (await embed("gpu-embed")).json()).error.message).toBe(body.error.message);
    expect(logger.lines.filter((l) => l.msg === "onnx device: no WebGPU adapter" && l.model === "gpu-embed")).toHaveLength(1);

    const served = await embed("cpu-embed");
    expect(served.status).toBe(200);
    expect((await served.json()).data[0].embedding).toHaveLength(384);
    expect(s.deps.registry.engine("gpu-embed", "embedding").loaded).toBe(false);
    expect(s.deps.registry.engine("cpu-embed", "embedding").device).toBe("cpu");
  } finally {
    await s.stop();
  }
});

// On a host with an adapter (a GPU machine), the other half: the model loads on WebGPU and its
// vectors agree with the CPU's.
test.skipIf(noAdapter !== null)("with an adapter: the model loads on webgpu and its vectors match the CPU's", async () => {
  const folder = await ensureOnnxModel("embed");
  const make = (device: "cpu" | "webgpu") => new TransformersEmbeddingEngine({ modelId: device, folder, device, threads: 1, callTokens: 256, logger: memoryLogger() });
  const [gpu, cpu] = [make("webgpu"), make("cpu")];
  try {
    const input = ["A man is playing a guitar.", "It rained all day."];
    const [a, b] = [await gpu.embed(await gpu.tokenize(input)), await cpu.embed(await cpu.tokenize(input))];
    expect(gpu.device).toBe("webgpu");
    for (let i = 0; i < input.length; i++) for (let j = 0; j < a[i]!.length; j++) expect(a[i]![j]!).toBeCloseTo(b[i]![j]!, 3);
  } finally {
    await Promise.all([gpu.unload(), cpu.unload()]);
  }
});
