import { afterAll, describe, expect, test } from "bun:test";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { readClassifierFolder, readEmbedderFolder, readFolder } from "../../../src/3-engines/transformers/model-folder";
import { tempDir } from "../../helpers/app";

// Model folders as real exports lay them out, written file by file (no weights needed: the reader
// only checks that an ONNX file is there).

const root = tempDir("model-folder-");
afterAll(() => rmSync(root, { recursive: true, force: true }));
let n = 0;

function folder(files: Record<string, unknown>, onnx = ["model.onnx"]): string {
  const dir = join(root, `m${n++}`);
  const all: Record<string, unknown> = { "tokenizer.json": {}, "tokenizer_config.json": {}, ...files };
  for (const [name, value] of Object.entries(all)) {
    if (value === undefined) continue;
    mkdirSync(join(dir, name, ".."), { recursive: true });
    writeFileSync(join(dir, name), JSON.stringify(value));
  }
  mkdirSync(join(dir, "onnx"), { recursive: true });
  for (const f of onnx) writeFileSync(join(dir, "onnx", f), "");
  return dir;
}

const bert = { model_type: "bert", hidden_size: 384, max_position_embeddings: 512 };

describe("length limit", () => {
  test.each([
    ["max_position_embeddings alone", { "config.json": bert }, 512],
    ["tokenizer model_max_length below it", { "config.json": bert, "tokenizer_config.json": { model_max_length: 128 } }, 128],
    ["a 'no limit' sentinel is ignored", { "config.json": bert, "tokenizer_config.json": { model_max_length: 1e30 } }, 512],
    ["sentence-transformers max_seq_length", { "config.json": bert, "sentence_bert_config.json": { max_seq_length: 256 } }, 256],
    ["RoBERTa family: positions less the padding offset", { "config.json": { model_type: "xlm-roberta", hidden_size: 384, max_position_embeddings: 514, pad_token_id: 1 } }, 512],
  ])("%s", (_, files, expected) => {
    expect(readFolder(folder(files)).maxTokens).toBe(expected);
  });

  test("a folder that states no limit is refused", () => {
    expect(() => readFolder(folder({ "config.json": { model_type: "bert" } }))).toThrow("no length limit");
  });
});

describe("files", () => {
  test("the weights file picks the dtype: fp32, else q8, else fp16", () => {
    expect(readFolder(folder({ "config.json": bert })).dtype).toBe("fp32");
    expect(readFolder(folder({ "config.json": bert }, ["model_quantized.onnx"])).dtype).toBe("q8");
    expect(readFolder(folder({ "config.json": bert }, ["model_fp16.onnx"])).dtype).toBe("fp16");
    expect(() => readFolder(folder({ "config.json": bert }, []))).toThrow("no onnx/model.onnx");
  });

  test("a folder without config.json or tokenizer files is refused with the file named", () => {
    expect(() => readFolder(folder({}))).toThrow("no config.json");
    expect(() => readFolder(folder({ "config.json": bert, "tokenizer.json": undefined }))).toThrow("no tokenizer.json");
  });
});

describe("pooling", () => {
  const modules = (poolingPath: string) => [
    { idx: 0, name: "0", path: "", type: "sentence_transformers.models.Transformer" },
    { idx: 1, name: "1", path: poolingPath, type: "sentence_transformers.models.Pooling" },
  ];

  test("the Pooling module named in modules.json decides, and its dimension is the vector's", () => {
    const info = readEmbedderFolder(
      folder({ "config.json": bert, "modules.json": modules("pool"), "pool/config.json": { word_embedding_dimension: 384, pooling_mode_cls_token: true, pooling_mode_mean_tokens: false } }),
    );
    expect(info.pooling).toBe("cls");
    expect(info.poolingSource).toBe("pool/config.json");
    expect(info.dimensions).toBe(384);
  });

  test("1_Pooling/config.json is read without modules.json; mean_sqrt_len is mean (same direction once normalised)", () => {
    expect(readEmbedderFolder(folder({ "config.json": bert, "1_Pooling/config.json": { pooling_mode_max_tokens: true } })).pooling).toBe("max");
    expect(readEmbedderFolder(folder({ "config.json": bert, "1_Pooling/config.json": { pooling_mode_mean_sqrt_len_tokens: true } })).pooling).toBe("mean");
  });

  test("a folder without a pooling config means mean pooling, and says so", () => {
    const info = readEmbedderFolder(folder({ "config.json": bert }));
    expect(info.pooling).toBe("mean");
    expect(info.poolingSource).toContain("default");
    expect(info.dimensions).toBe(384);
  });

  test("several pooling modes at once, unknown modes and extra Dense layers are refused", () => {
    expect(() => readEmbedderFolder(folder({ "config.json": bert, "1_Pooling/config.json": { pooling_mode_mean_tokens: true, pooling_mode_cls_token: true } }))).toThrow("exactly one pooling mode");
    expect(() => readEmbedderFolder(folder({ "config.json": bert, "1_Pooling/config.json": { pooling_mode_weightedmean_tokens: true } }))).toThrow("not supported");
    expect(() =>
      readEmbedderFolder(folder({ "config.json": bert, "modules.json": [...modules("1_Pooling"), { idx: 2, name: "2", path: "2_Dense", type: "sentence_transformers.models.Dense" }] })),
    ).toThrow("Dense is not supported");
  });
});

describe("labels", () => {
  const withLabels = (id2label: Record<string, string>) => folder({ "config.json": { ...bert, id2label } });

  test("each API label maps to the model's logit index, case-insensitively", () => {
    expect(readClassifierFolder(withLabels({ 0: "neutral", 1: "contradiction", 2: "entailment" })).logitIndex).toEqual([1, 2, 0]);
    expect(readClassifierFolder(withLabels({ 0: "ENTAILMENT", 1: "NEUTRAL", 2: "CONTRADICTION" })).logitIndex).toEqual([2, 0, 1]);
  });

  test("a model whose labels are not exactly the three NLI labels is refused", () => {
    const sets: Record<string, string>[] = [{ 0: "entailment", 1: "not_entailment" }, { 0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2" }, { 0: "entailment", 1: "neutral", 2: "contradiction", 3: "other" }];
    for (const labels of sets)
      expect(() => readClassifierFolder(withLabels(labels))).toThrow("id2label must be exactly");
    expect(() => readClassifierFolder(folder({ "config.json": bert }))).toThrow("id2label must be exactly");
  });
});
