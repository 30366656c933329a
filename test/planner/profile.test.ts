import { describe, expect, test } from "bun:test";
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { ensureChatModel } from "../../models/cache";
import { ensureDiffusionModel } from "../../models/diffusion/cache";
import { ensureZImageModel } from "../../models/diffusion/z-image";
import { ensureOnnxModel } from "../../models/onnx/cache";
import { CHAT_PRESETS } from "../../models/presets";
import { ensureProjector } from "../../models/projector-cache";
import type { ModelManifest } from "../../src/lib/manifest";
import { CPU_WEIGHT_COPIES, WORKER_RUNTIME } from "../../src/3-engines/planner/onnx-profile";
import { profileModel } from "../../src/3-engines/planner/profile";

import type { LoadSettings, ModelProfile } from "../../src/3-engines/planner/types";

// Profiles of the generated models, read from their files: a chat model's cache grows with
// context × slots exactly as K and V cells do, its weights are its tensors, and an ONNX model's
// weights are the files its engine loads plus activations of a sane size (what ONNX Runtime really
// takes for them: onnx-measure.test.ts).

const MiB = 2 ** 20;
/** One engine worker's own runtime, MB. */
const runtimeMb = WORKER_RUNTIME / MiB;

function manifest(id: string, kind: ModelManifest["kind"], extra: Partial<ModelManifest> = {}): ModelManifest {
  return { id, name: id, kind, files: { model: "m" }, max_context: 4096, vision: false, slots: 1, load: "first_use", ...extra };
}
const files = (paths: Record<string, string>) => (role: string) => {
  const p = paths[role];
  if (!p) throw new Error(`no ${role}`);
  return p;
};

/** K and V bytes a token takes in every block (f16): blocks × KV heads × head size × 2 × 2. */
const kvPerToken = (p: (typeof CHAT_PRESETS)[keyof typeof CHAT_PRESETS]) => p.blocks * p.kvHeads * p.headDim * 2 * 2;

const gpu = (gpuLayers: number, contextSize: number, slots = 1): LoadSettings => ({ device: "vulkan", gpuLayers, contextSize, slots });
const cpu = (contextSize: number, slots = 1): LoadSettings => ({ device: "cpu", gpuLayers: 0, contextSize, slots });

/** The files in a folder, recursively, and their sizes summed. */
function folderBytes(dir: string, keep: (rel: string) => boolean = () => true): number {
  let n = 0;
  for (const e of readdirSync(dir, { withFileTypes: true, recursive: true }))
    if (e.isFile()) {
      const full = join(e.parentPath, e.name);
      if (keep(full.slice(dir.length + 1))) n += statSync(full).size;
    }
  return n;
}

describe("chat models (GGUF)", () => {
  test("layers, trained context and file size come from the GGUF", async () => {
    const path = await ensureChatModel("bench-64m");
    const p = await profileModel(manifest("bench", "chat"), files({ model: path }));
    const spec = CHAT_PRESETS["bench-64m"];
    expect(p).toMatchObject({ kind: "chat", layers: spec.blocks + 1, trainedContext: spec.contextLength, fileBytes: statSync(path).size });
  });

  test("the cache grows with context and slots as K and V cells do", async () => {
    const path = await ensureChatModel("bench-64m");
    const p = await profileModel(manifest("bench", "chat"), files({ model: path }));
    const perToken = kvPerToken(CHAT_PRESETS["bench-64m"]);
    for (const [c, s] of [
      [256, 1],
      [1024, 1],
      [4096, 1],
      [1024, 3],
      [4096, 4],
    ] as const) {
      const f = await p.footprint(gpu(p.layers, c, s));
      expect({ c, s, cacheMb: f.parts.cacheMb }).toEqual({ c, s, cacheMb: Math.ceil((c * s * perToken) / MiB) });
    }
    // a context is padded to 256 cells, as llama.cpp pads it
    expect((await p.footprint(gpu(p.layers, 1000))).parts.cacheMb).toBe((await p.footprint(gpu(p.layers, 1024))).parts.cacheMb);
    // more context never needs less
    const sizes = await Promise.all([512, 1024, 2048, 4096].map((c) => p.footprint(gpu(p.layers, c))));
    for (let i = 1; i < sizes.length; i++) expect(sizes[i]!.gpuMb).toBeGreaterThan(sizes[i - 1]!.gpuMb);
  });

  test("all layers offloaded: weights and cache on the GPU but the token embedding; on the CPU: nothing on the GPU", async () => {
    const path = await ensureChatModel("bench-64m");
    const p = await profileModel(manifest("bench", "chat"), files({ model: path }));
    const full = await p.footprint(gpu(p.layers, 4096));
    const host = await p.footprint(cpu(4096));
    const fileMb = statSync(path).size / MiB;
    // the tensors are the file less its header; each side rounds up to a whole MB
    expect(full.parts.weightsMb).toBeGreaterThanOrEqual(Math.floor(fileMb));
    expect(full.parts.weightsMb).toBeLessThanOrEqual(Math.ceil(fileMb) + 1);
    expect(full.gpuMb).toBeGreaterThan(full.cpuMb);
    expect(full.gpuMb + full.cpuMb).toBe(full.parts.weightsMb + full.parts.cacheMb + full.parts.computeMb + full.parts.projectorMb);
    expect(host.gpuMb).toBe(0);
    expect(host.parts.cacheMb).toBe(40);
    expect(host.cpuMb).toBe(host.parts.weightsMb + host.parts.cacheMb + host.parts.computeMb);
  });

  test("a partial offload splits weights and cache by layer: the GPU holds more with every layer", async () => {
    const path = await ensureChatModel("bench-64m");
    const p = await profileModel(manifest("bench", "chat"), files({ model: path }));
    const perLayerKvMb = (4096 * kvPerToken(CHAT_PRESETS["bench-64m"])) / CHAT_PRESETS["bench-64m"].blocks / MiB; // 4 MB
    let last = -1;
    for (let g = 1; g <= p.layers; g++) {
      const f = await p.footprint(gpu(g, 4096));
      expect(f.gpuMb).toBeGreaterThanOrEqual(last);
      last = f.gpuMb;
      // g layers = the output layer and g - 1 blocks, each block's cache with it: the cache moves, all of it stays
      expect(f.parts.cacheMb).toBe(40);
    }
    const five = await p.footprint(gpu(5, 4096));
    const all = await p.footprint(gpu(p.layers, 4096));
    expect(all.gpuMb - five.gpuMb).toBeGreaterThanOrEqual(6 * perLayerKvMb);
  });

  test("its largest device tensor is one layer's K for every slot, there once a block is offloaded; a CPU runtime is no GPU runtime", async () => {
    const path = await ensureChatModel("bench-64m");
    const p = (await profileModel(manifest("bench", "chat"), files({ model: path }))) as ModelProfile;
    const spec = CHAT_PRESETS["bench-64m"];
    const k = (cells: number) => cells * spec.kvHeads * spec.headDim * 2;
    expect(p.largestTensorBytes!(gpu(p.layers, 4096, 2))).toBe(k(8192));
    expect(p.largestTensorBytes!(gpu(2, 1000))).toBe(k(1024)); // padded to 256 cells, as the cache
    expect(p.largestTensorBytes!(gpu(1, 4096))).toBe(0); // the output layer alone: no cache on the GPU
    expect(p.largestTensorBytes!(cpu(4096))).toBe(0);
    expect(p.runtimeGpu).toBeUndefined();
  });

  test("a vision model's projector follows the layers", async () => {
    const [model, mmproj] = await Promise.all([ensureChatModel("chat"), ensureProjector()]);
    const p = await profileModel(manifest("vision", "chat", { vision: true }), files({ model, mmproj }));
    expect(p.fileBytes).toBe(statSync(model).size + statSync(mmproj).size);
    const on = await p.footprint(gpu(p.layers, 2048));
    const off = await p.footprint(cpu(2048));
    expect(on.parts.projectorMb).toBeGreaterThan(0);
    expect(on.parts.projectorMb).toBeLessThan(4);
    expect(off.parts.projectorMb).toBe(on.parts.projectorMb);
    expect(off.gpuMb).toBe(0);
  });

  test("asking again is cheap: the same profile, footprints memoised", async () => {
    const path = await ensureChatModel("long-chat");
    const m = manifest("long", "chat");
    const a = await profileModel(m, files({ model: path }));
    const started = performance.now();
    const b = await profileModel(m, files({ model: path }));
    for (let i = 0; i < 100; i++) await b.footprint(gpu(b.layers, 65536, 2));
    expect(b).toBe(a);
    expect(performance.now() - started).toBeLessThan(50);
  });
});

describe("ONNX models", () => {
  test("an embedding model: its graph and tokenizer, plus one call's activations and its worker", async () => {
    const folder = await ensureOnnxModel("embed");
    const p = await profileModel(manifest("embed", "embedding", { max_context: 512 }), files({ model: folder }));
    const graph = statSync(join(folder, "onnx/model.onnx")).size;
    const tokenizer = statSync(join(folder, "tokenizer.json")).size;
    expect(p).toMatchObject({ kind: "embedding", layers: 1, trainedContext: 512, fileBytes: graph + tokenizer });
    const f = await p.footprint(cpu(512));
    // on the CPU ONNX Runtime holds the graph's weights CPU_WEIGHT_COPIES over
    expect(f.parts.weightsMb).toBe(Math.ceil((graph * CPU_WEIGHT_COPIES + tokenizer) / MiB));
    // 512 tokens through a 384-wide block with 6 heads of scores: some MB, not hundreds
    expect(f.parts.computeMb).toBeGreaterThan(runtimeMb + 1);
    expect(f.parts.computeMb).toBeLessThan(runtimeMb + 64);
    expect(f.gpuMb).toBe(0);
    // shorter inputs need less; on a GPU a call holds up to 16,384 padded tokens
    expect((await p.footprint(cpu(16))).parts.computeMb).toBeLessThan(f.parts.computeMb);
    const onGpu = await p.footprint({ device: "cuda", gpuLayers: 1, contextSize: 512, slots: 1 });
    expect(onGpu.gpuMb).toBeGreaterThan(f.parts.computeMb);
    // the host keeps the tokenizer and the worker
    expect(onGpu.cpuMb).toBe(Math.ceil(tokenizer / MiB) + runtimeMb);
  });

  test("a classifier: its folder's own token limit, capped by the manifest and by the API's 4,096", async () => {
    const folder = await ensureOnnxModel("nli");
    const p = await profileModel(manifest("nli", "classifier", { max_context: 24 }), files({ model: folder }));
    expect(p).toMatchObject({ kind: "classifier", trainedContext: 24, fileBytes: statSync(join(folder, "onnx/model.onnx")).size + statSync(join(folder, "tokenizer.json")).size });
    const f = await p.footprint(cpu(24));
    expect(f.parts.computeMb).toBeGreaterThan(runtimeMb);
    expect(f.parts.computeMb).toBeLessThan(runtimeMb + 8);
    // its 8,192 positions are more than a classification item may have: calls are 4,096 tokens at most
    const long = await profileModel(manifest("nli", "classifier", { max_context: 8192 }), files({ model: folder }));
    expect(long.trainedContext).toBe(4096);
    expect(await long.footprint(cpu(8192))).toEqual(await long.footprint(cpu(4096)));
  });

  test("a diffusers-style image model: three graphs and the tokenizer per worker, activations by image side", async () => {
    for (const preset of ["diffusion-turbo", "diffusion-sd"] as const) {
      const dir = ensureDiffusionModel(preset);
      const p = await profileModel(manifest(preset, "image"), files({ model: dir }));
      const bytes = folderBytes(dir, (rel) => rel.endsWith("model.onnx") || rel.startsWith("tokenizer/"));
      expect(p).toMatchObject({ kind: "image", layers: 1, trainedContext: 1536, fileBytes: bytes });
      const one = await p.footprint(cpu(512));
      const two = await p.footprint(cpu(512, 2));
      const big = await p.footprint(cpu(1024));
      const tokenizer = folderBytes(dir, (rel) => rel.startsWith("tokenizer/"));
      expect(one.parts.weightsMb).toBe(Math.ceil(((bytes - tokenizer) * CPU_WEIGHT_COPIES + tokenizer) / MiB));
      expect(one.parts.computeMb).toBeGreaterThan(runtimeMb);
      expect(one.parts.computeMb).toBeLessThan(runtimeMb + 128);
      expect(big.parts.computeMb).toBeGreaterThan(2 * one.parts.computeMb);
      // a worker per slot, each with its own pipeline
      expect(two.parts.computeMb).toBeGreaterThanOrEqual(2 * one.parts.computeMb - 1);
      expect(two.parts.computeMb).toBeLessThanOrEqual(2 * one.parts.computeMb);
    }
  });

  test("a Z-Image bundle: the graphs with their external data", async () => {
    const dir = ensureZImageModel("z-image-tiny");
    const p = await profileModel(manifest("z", "image", { max_context: 512 }), files({ model: dir }));
    const bytes = folderBytes(dir, (rel) => /^onnx\/(text_encoder_model|transformer_model|vae_decoder_model)/.test(rel) || rel.startsWith("tokenizer/"));
    expect(folderBytes(dir, (rel) => rel.includes(".onnx_data"))).toBeGreaterThan(0);
    expect(p.fileBytes).toBe(bytes);
    const f = await p.footprint({ device: "cuda", gpuLayers: 1, contextSize: 512, slots: 1 });
    expect(f.gpuMb).toBeGreaterThan(0);
    expect(f.parts.computeMb).toBeLessThan(runtimeMb + 128);
  });
});
