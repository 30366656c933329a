import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { isAbsolute, join } from "node:path";
import { readGgufFileInfo } from "node-llama-cpp";
import {
  PROJECTOR_GENERATOR_VERSION,
  PROJECTOR_PRESETS,
  projectorImageTokens,
  writeProjector,
  type ProjectorSpec,
} from "../../models/generate-mmproj";
import { GgmlType } from "../../models/gguf/types";
import { CHAT_PRESETS } from "../../models/presets";
import { cachedProjectorFileName, ensureProjector } from "../../models/projector-cache";
import { tempFolder } from "./llama";

const tmp = tempFolder("projector-");
afterAll(tmp.remove);

const spec = PROJECTOR_PRESETS["chat-vision"];

/** Reads a dotted key from node-llama-cpp's nested metadata object. */
function meta(info: Awaited<ReturnType<typeof readGgufFileInfo>>, key: string): unknown {
  return key.split(".").reduce<unknown>((node, part) => (node as Record<string, unknown> | undefined)?.[part], info.metadata);
}

/** Every tensor clip.cpp's load_tensors + clip_graph_siglip use for gemma3, with GGUF ne order and type. */
function expectedTensors(s: ProjectorSpec): Array<[string, number[], GgmlType]> {
  const d = s.embedding;
  const ff = s.feedForward;
  const m = s.matrixType === "f16" ? GgmlType.F16 : GgmlType.F32;
  const F32 = GgmlType.F32;
  const out: Array<[string, number[], GgmlType]> = [
    ["v.patch_embd.weight", [s.patchSize, s.patchSize, 3, d], F32],
    ["v.patch_embd.bias", [d], F32],
    ["v.position_embd.weight", [d, (s.imageSize / s.patchSize) ** 2], F32],
  ];
  for (let i = 0; i < s.blocks; i++) {
    const b = `v.blk.${i}.`;
    out.push(
      [`${b}ln1.weight`, [d], F32],
      [`${b}ln1.bias`, [d], F32],
      ...(["attn_q", "attn_k", "attn_v", "attn_out"] as const).flatMap((n): Array<[string, number[], GgmlType]> => [
        [`${b}${n}.weight`, [d, d], m],
        [`${b}${n}.bias`, [d], F32],
      ]),
      [`${b}ln2.weight`, [d], F32],
      [`${b}ln2.bias`, [d], F32],
      [`${b}ffn_up.weight`, [d, ff], m],
      [`${b}ffn_up.bias`, [ff], F32],
      [`${b}ffn_down.weight`, [ff, d], m],
      [`${b}ffn_down.bias`, [d], F32],
    );
  }
  out.push(
    ["v.post_ln.weight", [d], F32],
    ["v.post_ln.bias", [d], F32],
    ["mm.soft_emb_norm.weight", [d], F32],
    ["mm.input_projection.weight", [s.projectionDim, d], m],
  );
  return out;
}

describe("the Gemma 3 mmproj generator", () => {
  test("writes the keys clip.cpp's load_hparams reads for a gemma3 projector", async () => {
    const path = join(tmp.dir, "a.gguf");
    const result = await writeProjector(path, spec);
    expect(result.path).toBe(path);
    expect(result.bytes).toBe(readFileSync(path).length);
    // 64/8 = 8 patches a side, pooled 2x2 -> 4x4 (clip_n_output_tokens for GEMMA3).
    expect(result.imageTokens).toBe(16);
    expect(projectorImageTokens(spec)).toBe(16);

    const info = await readGgufFileInfo(path, { logWarnings: false });
    const expected: Record<string, unknown> = {
      "general.architecture": "clip",
      "general.type": "mmproj",
      "general.file_type": 1,
      "clip.has_vision_encoder": true,
      "clip.projector_type": "gemma3",
      "clip.use_gelu": true,
      "clip.vision.image_size": 64,
      "clip.vision.patch_size": 8,
      "clip.vision.embedding_length": 32,
      "clip.vision.feed_forward_length": 64,
      "clip.vision.block_count": 2,
      "clip.vision.attention.head_count": 4,
      "clip.vision.projection_dim": CHAT_PRESETS.chat.embedding,
      "clip.vision.projector.scale_factor": 2,
      "clip.vision.image_mean": [0.5, 0.5, 0.5],
      "clip.vision.image_std": [0.5, 0.5, 0.5],
    };
    for (const [key, value] of Object.entries(expected)) expect([key, meta(info, key)]).toEqual([key, value]);
    expect(meta(info, "clip.vision.attention.layer_norm_epsilon")).toBeCloseTo(1e-6, 12);
  });

  test("writes every tensor with the name, ne order and type clip.cpp expects, and finite values", async () => {
    const path = join(tmp.dir, "a.gguf");
    if (!existsSync(path)) await writeProjector(path, spec);
    const info = await readGgufFileInfo(path, { logWarnings: false });
    const tensors = info.tensorInfo!.map((t) => [t.name, t.dimensions.map(Number), t.ggmlType]);
    expect(tensors).toEqual(expectedTensors(spec));
    // The projection's ne[0] is what clip_n_mmproj_embd reports; mtmd requires it to equal the text n_embd.
    expect(info.tensorInfo!.find((t) => t.name === "mm.input_projection.weight")!.dimensions.map(Number)[0]).toBe(64);
    // ffn_down.ne[0] != n_embd, so load_tensors' is_ffn_swapped heuristic leaves up/down as named.
    expect(Number(info.tensorInfo!.find((t) => t.name === "v.blk.0.ffn_down.weight")!.dimensions[0])).not.toBe(spec.embedding);

    const raw = readFileSync(path);
    for (const t of info.tensorInfo!) {
      if (t.ggmlType !== GgmlType.F32) continue;
      const n = t.dimensions.map(Number).reduce((x, y) => x * y, 1);
      const start = Number(t.fileOffset);
      const values = new Float32Array(raw.buffer.slice(raw.byteOffset + start, raw.byteOffset + start + n * 4));
      expect([t.name, values.filter((v) => !(Math.abs(v) < 10)).length]).toEqual([t.name, 0]);
    }
  });

  test("the same seed gives the same bytes and another seed different bytes", async () => {
    const [a, b, c] = ["s1a.gguf", "s1b.gguf", "s2.gguf"].map((f) => join(tmp.dir, f)) as [string, string, string];
    await writeProjector(a, spec);
    await writeProjector(b, spec);
    await writeProjector(c, { ...spec, seed: spec.seed + 1 });
    expect(Buffer.compare(readFileSync(a), readFileSync(b))).toBe(0);
    expect(readFileSync(c).length).toBe(readFileSync(a).length);
    expect(Buffer.compare(readFileSync(a), readFileSync(c))).not.toBe(0);
  });

  test("rejects specs clip.cpp could not run or would misread", async () => {
    const path = join(tmp.dir, "bad.gguf");
    await expect(writeProjector(path, { ...spec, imageSize: 60 })).rejects.toThrow("patchSize");
    await expect(writeProjector(path, { ...spec, mergeFactor: 3 })).rejects.toThrow("mergeFactor");
    await expect(writeProjector(path, { ...spec, heads: 5 })).rejects.toThrow("heads");
    await expect(writeProjector(path, { ...spec, feedForward: spec.embedding })).rejects.toThrow("feedForward");
  });
});

describe("the projector cache", () => {
  test("ensureProjector generates once and returns the same absolute path", async () => {
    const dir = join(tmp.dir, "cache");
    const [first, concurrent] = await Promise.all([ensureProjector("chat-vision", dir), ensureProjector("chat-vision", dir)]);
    expect(isAbsolute(first)).toBe(true);
    expect(concurrent).toBe(first);
    expect(first).toBe(join(dir, cachedProjectorFileName("chat-vision", spec)));
    expect(first).toContain(PROJECTOR_GENERATOR_VERSION);
    expect(first.endsWith(".gguf")).toBe(true);
    expect(await ensureProjector("chat-vision", dir)).toBe(first);
    expect(readdirSync(dir)).toEqual([cachedProjectorFileName("chat-vision", spec)]);
    await expect(ensureProjector("nope", dir)).rejects.toThrow("unknown projector preset");
  });
});
