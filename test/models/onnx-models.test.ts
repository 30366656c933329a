import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Value } from "@sinclair/typebox/value";
import { existsSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import * as ort from "onnxruntime-node";
import { cachedOnnxFolderName, ensureOnnxModel, ensureOnnxModelSpec } from "../../models/onnx/cache";
import { ONNX_DEMO_GENERATORS } from "../../models/onnx/demo";
import { ONNX_GENERATOR_VERSION } from "../../models/onnx/generate";
import { ONNX_PRESETS } from "../../models/onnx/presets";
import { ModelManifest } from "../../src/lib/manifest";
import { tempDir } from "../helpers/app";

const tmp = tempDir("onnx-models-");
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const json = (folder: string, file: string) => JSON.parse(readFileSync(join(folder, file), "utf8"));

let embed: string;
let nli: string;
let rerank: string;
beforeAll(async () => {
  [embed, nli, rerank] = await Promise.all([ensureOnnxModel("embed"), ensureOnnxModel("nli"), ensureOnnxModel("rerank")]);
});

const session = (folder: string) => ort.InferenceSession.create(join(folder, "onnx", "model.onnx"), { executionProviders: ["cpu"], intraOpNumThreads: 1 });
const ints = (rows: number[][]) => new ort.Tensor("int64", BigInt64Array.from(rows.flat(), BigInt), [rows.length, rows[0]!.length]);
async function run(s: ort.InferenceSession, ids: number[][], mask = ids.map((r) => r.map(() => 1)), types = ids.map((r) => r.map(() => 0))) {
  return s.run({ input_ids: ints(ids), attention_mask: ints(mask), token_type_ids: ints(types) });
}
const maxDiff = (a: ArrayLike<number>, b: ArrayLike<number>) => Math.max(...Array.from(a, (x, i) => Math.abs(x - b[i]!)));

describe("the embedder", () => {
  test("its folder has the layout of a BERT export with sentence-transformers files", () => {
    for (const f of ["config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt", "onnx/model.onnx", "modules.json", "sentence_bert_config.json", "1_Pooling/config.json"])
      expect(existsSync(join(embed, f))).toBe(true);
    expect(json(embed, "config.json")).toMatchObject({ model_type: "bert", architectures: ["BertModel"], hidden_size: 384, max_position_embeddings: 512, type_vocab_size: 2 });
    expect(json(embed, "tokenizer_config.json")).toMatchObject({ tokenizer_class: "BertTokenizer", model_max_length: 512 });
    expect(json(embed, "1_Pooling/config.json")).toMatchObject({ word_embedding_dimension: 384, pooling_mode_mean_tokens: true, pooling_mode_cls_token: false });
    expect(json(embed, "modules.json").map((m: any) => m.path)).toEqual(["", "1_Pooling", "2_Normalize"]);
  });

  test("its graph has BERT's inputs and last_hidden_state [batch, sequence, 384]", async () => {
    const s = await session(embed);
    expect(s.inputNames).toEqual(["input_ids", "attention_mask", "token_type_ids"]);
    expect(s.outputNames).toEqual(["last_hidden_state"]);
    const out = await run(s, [[2, 40, 41, 3], [2, 42, 43, 3]]);
    expect(out.last_hidden_state!.dims).toEqual([2, 4, 384]);
  });

  test("every position depends on the other tokens, and padded positions change nothing", async () => {
    const s = await session(embed);
    const base = (await run(s, [[2, 40, 41, 3]])).last_hidden_state!.data as Float32Array;
    const changed = (await run(s, [[2, 40, 99, 3]])).last_hidden_state!.data as Float32Array;
    // Position 1 holds the same token in both: only attention can have moved it.
    expect(maxDiff(base.subarray(384, 768), changed.subarray(384, 768))).toBeGreaterThan(1e-3);
    const padded = (await run(s, [[2, 40, 41, 3, 0, 0]], [[1, 1, 1, 1, 0, 0]])).last_hidden_state!.data as Float32Array;
    expect(maxDiff(base, padded.subarray(0, 4 * 384))).toBeLessThan(1e-5);
    const masked = (await run(s, [[2, 40, 41, 3]], [[1, 1, 0, 1]])).last_hidden_state!.data as Float32Array;
    expect(maxDiff(base.subarray(384, 768), masked.subarray(384, 768))).toBeGreaterThan(1e-3);
  });
});

describe("the tokenizer", () => {
  test("is a WordPiece with BERT's special tokens and a vocabulary from the corpus", async () => {
    const tj = json(embed, "tokenizer.json");
    expect(tj.model.type).toBe("WordPiece");
    expect(tj.added_tokens.map((t: any) => [t.content, t.id])).toEqual([["[PAD]", 0], ["[UNK]", 1], ["[CLS]", 2], ["[SEP]", 3], ["[MASK]", 4]]);
    const { AutoTokenizer } = await import("@huggingface/transformers");
    const tok = await AutoTokenizer.from_pretrained(embed, { local_files_only: true });
    const v = tj.model.vocab;
    expect(tok.encode("The guitar")).toEqual([2, v.the, v.guitar, 3]);
    // An unseen word falls back to character pieces, not [UNK].
    expect(tok.tokenize("zyx")).toEqual(["z", "##y", "##x"]);
    const pair = tok("a cat", { text_pair: "a dog", return_tensor: false, return_token_type_ids: true });
    expect(pair.input_ids).toEqual([2, v.a, v.cat, 3, v.a, v.dog, 3]);
    expect(pair.token_type_ids).toEqual([0, 0, 0, 0, 1, 1, 1]);
  });
});

describe("the classifier", () => {
  test("outputs logits [batch, 3] and names its labels in a non-canonical order", async () => {
    expect(json(nli, "config.json")).toMatchObject({ model_type: "bert", architectures: ["BertForSequenceClassification"], id2label: { 0: "neutral", 1: "contradiction", 2: "entailment" } });
    const s = await session(nli);
    expect(s.outputNames).toEqual(["logits"]);
    const out = await run(s, [[2, 40, 3, 41, 3]], undefined, [[0, 0, 0, 1, 1]]);
    expect(out.logits!.dims).toEqual([1, 3]);
  });

  test("its logits depend on the premise, the hypothesis, their order and the segment ids", async () => {
    const s = await session(nli);
    const logits = async (ids: number[], types: number[]) => Array.from((await run(s, [ids], undefined, [types])).logits!.data as Float32Array);
    const a = await logits([2, 40, 3, 41, 3], [0, 0, 0, 1, 1]);
    for (const other of [await logits([2, 40, 3, 42, 3], [0, 0, 0, 1, 1]), await logits([2, 41, 3, 40, 3], [0, 0, 0, 1, 1]), await logits([2, 40, 3, 41, 3], [0, 0, 0, 0, 0])])
      expect(maxDiff(a, other)).toBeGreaterThan(1e-3);
  });
});

describe("the reranker", () => {
  test("has the layout, config and I/O names of cross-encoder/ms-marco-MiniLM-L6-v2's ONNX export", async () => {
    for (const f of ["config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt", "onnx/model.onnx"]) expect(existsSync(join(rerank, f))).toBe(true);
    expect(existsSync(join(rerank, "modules.json"))).toBe(false);
    expect(json(rerank, "config.json")).toMatchObject({
      model_type: "bert",
      architectures: ["BertForSequenceClassification"],
      id2label: { 0: "LABEL_0" },
      label2id: { LABEL_0: 0 },
      max_position_embeddings: 512,
      type_vocab_size: 2,
    });
    expect(json(rerank, "tokenizer_config.json")).toMatchObject({ tokenizer_class: "BertTokenizer", model_max_length: 512 });
    const s = await session(rerank);
    expect(s.inputNames).toEqual(["input_ids", "attention_mask", "token_type_ids"]);
    expect(s.outputNames).toEqual(["logits"]);
    const out = await run(s, [[2, 40, 3, 41, 3], [2, 42, 3, 43, 3]], undefined, [[0, 0, 0, 1, 1], [0, 0, 0, 1, 1]]);
    expect(out.logits!.dims).toEqual([2, 1]);
  });

  test("its one logit depends on the query, the document and the segment ids", async () => {
    const s = await session(rerank);
    const logit = async (ids: number[], types: number[]) => Array.from((await run(s, [ids], undefined, [types])).logits!.data as Float32Array);
    const a = await logit([2, 40, 3, 41, 3], [0, 0, 0, 1, 1]);
    for (const other of [await logit([2, 40, 3, 42, 3], [0, 0, 0, 1, 1]), await logit([2, 41, 3, 40, 3], [0, 0, 0, 1, 1]), await logit([2, 40, 3, 41, 3], [0, 0, 0, 0, 0])])
      expect(maxDiff(a, other)).toBeGreaterThan(1e-3);
  });
});

describe("generation", () => {
  test("is deterministic: the same spec gives byte-identical files", async () => {
    const [a, b] = await Promise.all([ensureOnnxModel("nli", join(tmp, "a")), ensureOnnxModel("nli", join(tmp, "b"))]);
    for (const f of ["onnx/model.onnx", "tokenizer.json", "config.json"]) expect(readFileSync(join(a, f)).equals(readFileSync(join(b, f)))).toBe(true);
  });

  test("is cached by generator version and spec, shared by concurrent callers, and leaves no temp folders", async () => {
    const dir = join(tmp, "shared");
    const [first, again] = await Promise.all([ensureOnnxModel("nli", dir), ensureOnnxModel("nli", dir)]);
    expect(again).toBe(first);
    expect(first).toBe(join(dir, cachedOnnxFolderName("nli", ONNX_PRESETS.nli)));
    expect(first).toContain(ONNX_GENERATOR_VERSION);
    expect(cachedOnnxFolderName("nli", { ...ONNX_PRESETS.nli, seed: 99 })).not.toBe(cachedOnnxFolderName("nli", ONNX_PRESETS.nli));
    expect(await ensureOnnxModelSpec("nli", ONNX_PRESETS.nli, dir)).toBe(first);
    expect(readdirSync(dir)).toEqual([cachedOnnxFolderName("nli", ONNX_PRESETS.nli)]);
  });

  test("concurrent processes sharing the folder all get the complete folder", async () => {
    const dir = join(tmp, "processes");
    const module = resolve(import.meta.dir, "../../models/onnx/cache.ts");
    const script = `const { ensureOnnxModel } = await import(${JSON.stringify(module)}); console.log(await ensureOnnxModel("nli", ${JSON.stringify(dir)}));`;
    const runs = [0, 1, 2].map(() => Bun.spawn([process.execPath, "-e", script], { stdout: "pipe", stderr: "inherit" }));
    const paths = await Promise.all(runs.map(async (p) => ((await p.exited) === 0 ? (await new Response(p.stdout).text()).trim() : "failed")));
    expect(new Set(paths).size).toBe(1);
    expect(readdirSync(dir)).toEqual([cachedOnnxFolderName("nli", ONNX_PRESETS.nli)]);
    expect(existsSync(join(paths[0]!, "onnx", "model.onnx"))).toBe(true);
  });

  test("the benchmark preset has all-MiniLM-L6-v2's shape", () => {
    expect(ONNX_PRESETS["embed-bench"]).toMatchObject({ hidden: 384, layers: 6, heads: 12, intermediate: 1536, maxPositions: 512 });
  });
});

test("the demo generators write an embedder, a classifier and a reranker and return valid manifests", async () => {
  const dir = join(tmp, "demo");
  const manifests = await Promise.all(ONNX_DEMO_GENERATORS.map((g) => g.ensure(dir)));
  expect(manifests.map((m) => [m.id, m.kind, m.max_context])).toEqual([
    ["demo-embed", "embedding", 512],
    ["demo-nli", "classifier", 4096],
    ["demo-rerank", "reranker", 512],
  ]);
  for (const m of manifests) {
    expect(Value.Check(ModelManifest, m)).toBe(true);
    expect(m.files.model!.startsWith(dir)).toBe(true);
    expect(existsSync(join(m.files.model!, "onnx", "model.onnx"))).toBe(true);
  }
});
