import { afterAll, beforeAll, expect, test } from "bun:test";
import { cpSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ensureOnnxModel } from "../../../models/onnx/cache";
import { validateConfig } from "../../../src/lib/config";
import type { ModelManifest } from "../../../src/lib/manifest";
import { TransformersEmbeddingEngine } from "../../../src/3-engines/transformers/embedding-engine";
import { transformersFactories } from "../../../src/3-engines/transformers/factory";
import { memoryLogger } from "../../../src/lib/log";
import { tempDir } from "../../helpers/app";
import { norm } from "../../helpers/onnx";

let folder: string;
let engine: TransformersEmbeddingEngine;
const logger = memoryLogger();
const tmp = tempDir("embed-engine-");

function makeEngine(model: string, manifest: Partial<ModelManifest> = {}, threads = 1) {
  const config = validateConfig({ engines: { device: "cpu", threads } });
  const m = validateConfig({ models: [{ id: "e", name: "e", kind: "embedding", files: { model }, max_context: 512, ...manifest }] }).models[0]!;
  return transformersFactories(config, logger).embedding!(m, () => model) as TransformersEmbeddingEngine;
}

beforeAll(async () => {
  folder = await ensureOnnxModel("embed");
  engine = makeEngine(folder);
  await engine.load();
});
afterAll(async () => {
  await engine.unload();
  rmSync(tmp, { recursive: true, force: true });
});

const SENTENCES = ["A woman is reading a book in the park.", "Two children are running along the beach with a small brown dog.", "hello"];

test("vectors equal transformers.js's own feature-extraction pipeline with mean pooling and normalisation", async () => {
  const { pipeline } = await import("@huggingface/transformers");
  const extractor = await pipeline("feature-extraction", folder, { local_files_only: true, device: "cpu", dtype: "fp32", session_options: { intraOpNumThreads: 1 } });
  const reference = (await extractor(SENTENCES, { pooling: "mean", normalize: true })).tolist() as number[][];
  const ours = await engine.embed(await engine.tokenize(SENTENCES));
  ours.forEach((v, i) => {
    expect(v).toHaveLength(384);
    expect(norm(v)).toBeCloseTo(1, 5);
    expect(Math.max(...reference[i]!.map((x, k) => Math.abs(x - v[k]!)))).toBeLessThan(1e-5);
  });
  await extractor.dispose();
});

test("a vector does not depend on what it is batched with", async () => {
  const [alone] = await engine.embed(await engine.tokenize(["hello"]));
  const [withLonger] = await engine.embed(await engine.tokenize(["hello", "a much longer sentence ".repeat(30)]));
  expect(Math.max(...alone!.map((x, k) => Math.abs(x - withLonger![k]!)))).toBeLessThan(1e-5);
});

test("token-id inputs get the template's special tokens; ids outside the vocabulary name their input", async () => {
  const [text] = await engine.tokenize(["the cat"]);
  const [ids] = await engine.tokenize([text!.slice(1, -1)]);
  expect(ids).toEqual(text!);
  await expect(engine.tokenize(["ok", [1, 1e9]])).rejects.toThrow("input[1][1]");
});

test("dimensions and length come from the folder, capped by the manifest's max_context", async () => {
  expect(engine.dimensions).toBe(384);
  expect(engine.maxTokens).toBe(512);
  expect(makeEngine(folder, { max_context: 100 }).maxTokens).toBe(100);
});

test("the device is explicit and threads are set: from [engines], or the manifest's own", async () => {
  const loads = () => logger.lines.filter((l) => l.msg === "embedding model loaded");
  expect(loads().at(-1)).toMatchObject({ model: "e", device: "cpu", threads: 1, dtype: "fp32" });
  const two = makeEngine(folder, { threads: 2 }, 1);
  await two.load();
  expect(loads().at(-1)).toMatchObject({ threads: 2 });
  await two.unload();
  expect(logger.lines.some((l) => l.msg === "onnx device" && l.device === "cpu" && l.reason === "configured")).toBe(true);
});

test("unload frees the model; the next use loads it again", async () => {
  const e = makeEngine(folder);
  await e.load();
  expect(e.loaded).toBe(true);
  await e.unload();
  expect(e.loaded).toBe(false);
  expect(await e.embed(await e.tokenize(["back again"]))).toHaveLength(1);
  expect(e.loaded).toBe(true);
  await e.unload();
});

test("unloading while a batch runs lets the batch finish, then ends the worker", async () => {
  const e = makeEngine(folder);
  await e.load();
  const running = e.embed(await e.tokenize(Array.from({ length: 32 }, (_, i) => `sentence ${i} `.repeat(50))));
  await Bun.sleep(20); // the native run is under way
  await e.unload();
  expect(await running).toHaveLength(32);
  expect(e.loaded).toBe(false);
});

test("a broken model file fails the load with the model named, and nothing stays loaded", async () => {
  const broken = join(tmp, "broken");
  cpSync(folder, broken, { recursive: true });
  writeFileSync(join(broken, "onnx", "model.onnx"), "not an onnx graph");
  const e = makeEngine(broken);
  await expect(e.load()).rejects.toThrow("cannot load embedding model e");
  expect(e.loaded).toBe(false);
});

test("a worker that dies fails only the batch it was running; the next use starts a new one", async () => {
  const e = makeEngine(folder);
  await e.load();
  // The worker ends as the batch reaches it. (Ending it from outside while its native ONNX call runs
  // would abort this whole process: a Bun limit the engine works around by never doing so.)
  const worker = (e as any).encoder.worker as Worker;
  worker.postMessage = ((m: { type: string }) => {
    if (m.type === "run") worker.terminate();
  }) as Worker["postMessage"];
  const running = e.embed(await e.tokenize(Array.from({ length: 32 }, (_, i) => `sentence ${i} `.repeat(50))));
  await expect(running).rejects.toThrow("worker for e failed");
  expect(e.loaded).toBe(false);
  expect(await e.embed(await e.tokenize(["after the crash"]))).toHaveLength(1);
  expect(e.loaded).toBe(true);
  await e.unload();
});

test("a CUDA session that cannot start falls back to CPU, logged, and serves", async () => {
  // Here the onnxruntime CUDA provider is absent, so asking for it directly must fail over.
  const lines = memoryLogger();
  const e = new TransformersEmbeddingEngine({ modelId: "gpu", folder, device: "cuda", threads: 1, callTokens: 256, logger: lines });
  await e.load();
  expect(lines.lines.find((l) => l.msg === "onnx device: CUDA session failed; using CPU")).toMatchObject({ model: "gpu" });
  expect(lines.lines.find((l) => l.msg === "embedding model loaded")).toMatchObject({ device: "cpu" });
  expect(await e.embed(await e.tokenize(["on the CPU after all"]))).toHaveLength(1);
  await e.unload();
});
