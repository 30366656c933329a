import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { statSync } from "node:fs";
import { GgufInsights, readGgufFileInfo } from "node-llama-cpp";
import { catalogue, isDownload, type DownloadEntry } from "../../models/catalogue";
import { GEMMA_3_27B, QWEN3_1_7B, q4KMType, useMoreBits, writeRealModel } from "../../models/gguf/real-archs";
import { GGML, encodeSparsePreamble, ggmlTensorBytes, writeSparseGguf, type SparseLayout } from "../../models/gguf/sparse";
import { str, u32 } from "../../models/gguf/types";
import { tempFolder } from "./llama";

// The catalogue's real chat models written as sparse GGUF files: the real header and tensor table,
// the real file's size, no weights on disk. What node-llama-cpp reads back must be the real model.

const tmp = tempFolder("sparse-gguf-");
afterAll(tmp.remove);

type Info = Awaited<ReturnType<typeof readGgufFileInfo>>;
const entry = (id: string) => catalogue().find((e): e is DownloadEntry => e.id === id && isDownload(e))!;
const written: Record<string, { path: string; layout: SparseLayout; bytes: number; info: Info }> = {};

beforeAll(async () => {
  for (const id of ["gemma-3-27b-it", "qwen3-1.7b"]) {
    const e = entry(id);
    for (const [role, w] of Object.entries(writeRealModel(id, tmp.dir, e.files)))
      written[`${id}/${role}`] = { ...w, bytes: e.files[role]!.bytes!, info: await readGgufFileInfo(w.path, { logWarnings: false }) };
  }
});

/** Dotted key lookup in node-llama-cpp's nested metadata. */
const meta = (info: Info, key: string): unknown =>
  key.split(".").reduce<unknown>((node, part) => (node as Record<string, unknown> | undefined)?.[part], info.metadata);

describe("sparse GGUF writer", () => {
  test("tensor byte sizes follow ggml's block sizes and refuse partial blocks", () => {
    expect(ggmlTensorBytes(GGML.Q4_K, [256, 2])).toBe(2 * 144);
    expect(ggmlTensorBytes(GGML.Q6_K, [512])).toBe(2 * 210);
    expect(ggmlTensorBytes(GGML.Q8_0, [64])).toBe(68);
    expect(ggmlTensorBytes(GGML.F16, [3, 5])).toBe(30);
    expect(() => ggmlTensorBytes(GGML.Q4_K, [100])).toThrow(/multiple of 256/);
  });

  test("tensor offsets are aligned and the file ends after the last tensor's padding", () => {
    const { preamble, layout } = encodeSparsePreamble({
      metadata: [["general.architecture", str("llama")], ["general.alignment", u32(64)]],
      tensors: [
        { name: "a", dims: [3], type: GGML.F32 },
        { name: "b", dims: [256, 3], type: GGML.Q4_K },
      ],
    });
    expect(preamble.length % 64).toBe(0);
    expect(layout.offsets).toEqual([0, 64]);
    expect(layout.dataBytes).toBe(64 + 448); // 432 bytes of Q4_K padded to 448
    expect(layout.fileBytes).toBe(preamble.length + layout.dataBytes);
  });

  test("a written file has its full size but only its header on disk", () => {
    const path = `${tmp.dir}/big.gguf`;
    const layout = writeSparseGguf(path, {
      metadata: [["general.architecture", str("llama")]],
      tensors: [{ name: "w", dims: [4096, 262144], type: GGML.Q4_K }],
    });
    const st = statSync(path);
    expect(st.size).toBe(layout.fileBytes);
    expect(st.size).toBeGreaterThan(576 * 2 ** 20); // 4096 × 262144 × 144/256 bytes
    expect(st.blocks * 512).toBeLessThan(2 ** 20);
  });
});

describe("Q4_K_M type mix (llama.cpp src/llama-quant.cpp)", () => {
  test("use_more_bits picks 30 of 62 layers and 14 of 28", () => {
    const count = (n: number) => Array.from({ length: n }, (_, i) => i).filter((i) => useMoreBits(i, n)).length;
    expect(count(62)).toBe(30);
    expect(count(28)).toBe(14);
    // first eighth, last eighth, and every third layer between
    expect([0, 6, 7, 8, 9, 12, 53, 54, 61].map((i) => useMoreBits(i, 62))).toEqual([true, true, false, false, true, true, false, true, true]);
  });

  test("tied embeddings are quantised as the output (Q6_K); untied ones as any matrix", () => {
    expect(q4KMType("token_embd", 0, 62, true)).toBe(GGML.Q6_K);
    expect(q4KMType("token_embd", 0, 28, false)).toBe(GGML.Q4_K);
    expect(q4KMType("output", 0, 28, false)).toBe(GGML.Q6_K);
    expect(q4KMType("norm", 3, 62, true)).toBe(GGML.F32);
    expect(q4KMType("matrix", 3, 62, true)).toBe(GGML.Q4_K);
  });
});

// Expected counts: gemma3 has 13 tensors a layer (src/models/gemma3.cpp) + token_embd + output_norm;
// qwen3 has 11 (src/models/qwen3.cpp) + token_embd + output_norm + output; the Gemma 3 projector has
// 3 embedding tensors, 16 a SigLIP block, post_ln (2), soft_emb_norm and input_projection.
const cases = [
  { key: "gemma-3-27b-it/model", arch: "gemma3", blocks: 62, tensors: 808, tokens: 262_144 },
  { key: "gemma-3-27b-it/mmproj", arch: "clip", blocks: 27, tensors: 439, tokens: undefined },
  { key: "qwen3-1.7b/model", arch: "qwen3", blocks: 28, tensors: 311, tokens: 151_936 },
] as const;

describe("the catalogue's real models as sparse files", () => {
  for (const c of cases) {
    test(`${c.key}: the catalogue's size within 1%, sparse on disk`, () => {
      const w = written[c.key]!;
      const st = statSync(w.path);
      expect(st.size).toBe(w.layout.fileBytes);
      // Within 1% of the real file: tensor data is exact (the same shapes and types); the header
      // differs by the synthetic vocabulary (Qwen's lacks the real 151k BPE merges, ~3 MB).
      expect(Math.abs(st.size - w.bytes) / w.bytes).toBeLessThan(0.01);
      // Only the header is allocated: at most a few MB of a multi-GB file.
      expect(st.blocks * 512).toBeLessThan(w.layout.dataOffset + 2 ** 20);
      expect(st.blocks * 512).toBeLessThan(st.size / 100);
    });

    test(`${c.key}: node-llama-cpp reads back the architecture, blocks, tensors and vocabulary`, () => {
      const { info } = written[c.key]!;
      expect(String(info.metadata.general.architecture)).toBe(c.arch);
      expect(info.fullTensorInfo?.length).toBe(c.tensors);
      const blocks = c.arch === "clip" ? meta(info, "clip.vision.block_count") : info.architectureMetadata.block_count;
      expect(blocks).toBe(c.blocks);
      expect((meta(info, "tokenizer.ggml.tokens") as unknown[] | undefined)?.length).toBe(c.tokens);
    });
  }

  test("gemma-3-27b-it: insights see 63 offloadable layers, the sliding window and the trained context", async () => {
    const ins = await GgufInsights.from(written["gemma-3-27b-it/model"]!.info);
    expect(ins.totalLayers).toBe(GEMMA_3_27B.layers + 1);
    expect(ins.swaSize).toBe(1024);
    expect(ins.trainContextSize).toBe(131_072);
    const a = written["gemma-3-27b-it/model"]!.info.architectureMetadata;
    expect([a.attention?.head_count, a.attention?.head_count_kv, a.attention?.key_length]).toEqual([32, 16, 128]);
  });

  test("gemma-3-27b-it: parameters match the Gemma 3 technical report's split", async () => {
    // Gemma 3 Technical Report (arxiv.org/abs/2503.19786), Table 1, 27B: 25,600M non-embedding,
    // 1,416M embedding, 417M vision encoder parameters. Tolerance 1%: the report rounds to the
    // million, and its embedding count is the checkpoint's 262,208 rows × 5,376 plus the 6.2M
    // vision-to-text projection (1,415.8M); the GGUF keeps 262,144 rows and puts the projection in
    // the mmproj (mm.input_projection).
    const text = await GgufInsights.from(written["gemma-3-27b-it/model"]!.info);
    const embedding = GEMMA_3_27B.embedding * GEMMA_3_27B.vocab;
    expect(Math.abs(text.totalParameters - embedding - 25_600e6) / 25_600e6).toBeLessThan(0.01);
    expect(Math.abs(embedding - 1_416e6) / 1_416e6).toBeLessThan(0.01);
    const vision = written["gemma-3-27b-it/mmproj"]!.info.fullTensorInfo!.filter((t) => t.name.startsWith("v."));
    const visionParams = vision.reduce((s, t) => s + t.dimensions.reduce((a: number, b) => a * Number(b), 1), 0);
    expect(Math.abs(visionParams - 417e6) / 417e6).toBeLessThan(0.01);
  });

  test("qwen3-1.7b: insights see 29 offloadable layers and a separate output matrix", async () => {
    const { info } = written["qwen3-1.7b/model"]!;
    const ins = await GgufInsights.from(info);
    expect(ins.totalLayers).toBe(QWEN3_1_7B.layers + 1);
    expect(ins.swaSize).toBeUndefined();
    expect(ins.trainContextSize).toBe(40_960);
    const byName = new Map(info.fullTensorInfo!.map((t) => [t.name, t]));
    expect(byName.get("output.weight")?.ggmlType).toBe(GGML.Q6_K);
    expect(byName.get("token_embd.weight")?.ggmlType).toBe(GGML.Q4_K);
  });

  test("the Q4_K_M mix: Q6_K on the output and on half the attn_v / ffn_down tensors", () => {
    const types = (key: string) => {
      const counts: Record<number, number> = {};
      for (const t of written[key]!.info.fullTensorInfo!) counts[t.ggmlType] = (counts[t.ggmlType] ?? 0) + 1;
      return counts;
    };
    // 62 layers: 30 attn_v + 30 ffn_down + token_embd (tied, so quantised as the output).
    expect(types("gemma-3-27b-it/model")).toEqual({ [GGML.F32]: 373, [GGML.Q4_K]: 374, [GGML.Q6_K]: 61 });
    // 28 layers: 14 attn_v + 14 ffn_down + output.weight.
    expect(types("qwen3-1.7b/model")).toEqual({ [GGML.F32]: 113, [GGML.Q4_K]: 169, [GGML.Q6_K]: 29 });
    expect(types("gemma-3-27b-it/mmproj")).toEqual({ [GGML.F32]: 2 + 1 + 27 * 10 + 3, [GGML.F16]: 27 * 6 + 1 });
  });
});
