import { afterAll, describe, expect, test } from "bun:test";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { isRerankerConfig, readRerankerFolder } from "../../../src/3-engines/transformers/model-folder";
import { tempDir } from "../../helpers/app";

// Cross-encoder folders as real exports lay them out (config.json as bge-reranker-v2-m3's and
// ms-marco-MiniLM-L6-v2's), written file by file: the reader only checks that an ONNX file is there.

const root = tempDir("reranker-folder-");
afterAll(() => rmSync(root, { recursive: true, force: true }));
let n = 0;

function folder(config: Record<string, unknown> | undefined, onnx = ["model.onnx"], tokenizer = true): string {
  const dir = join(root, `m${n++}`);
  mkdirSync(join(dir, "onnx"), { recursive: true });
  if (config) writeFileSync(join(dir, "config.json"), JSON.stringify(config));
  if (tokenizer) for (const f of ["tokenizer.json", "tokenizer_config.json"]) writeFileSync(join(dir, f), "{}");
  for (const f of onnx) writeFileSync(join(dir, "onnx", f), "");
  return dir;
}

const msMarco = {
  architectures: ["BertForSequenceClassification"],
  model_type: "bert",
  hidden_size: 384,
  max_position_embeddings: 512,
  type_vocab_size: 2,
  id2label: { 0: "LABEL_0" },
  label2id: { LABEL_0: 0 },
};
const bgeM3 = {
  architectures: ["XLMRobertaForSequenceClassification"],
  model_type: "xlm-roberta",
  hidden_size: 1024,
  max_position_embeddings: 8194,
  pad_token_id: 1,
  type_vocab_size: 1,
  id2label: { 0: "LABEL_0" },
  label2id: { LABEL_0: 0 },
};

describe("readRerankerFolder", () => {
  test("one label: ms-marco (BERT, 512) and bge-reranker-v2-m3 (XLM-RoBERTa, 8192, one segment) layouts", () => {
    expect(readRerankerFolder(folder(msMarco))).toMatchObject({ logits: 1, positive: 0, maxTokens: 512, dtype: "fp32", typeVocabSize: 2, labels: { 0: "LABEL_0" } });
    expect(readRerankerFolder(folder(bgeM3, ["model_quantized.onnx"]))).toMatchObject({ logits: 1, positive: 0, maxTokens: 8192, dtype: "q8", typeVocabSize: 1 });
    expect(readRerankerFolder(folder(bgeM3, ["model_fp16.onnx"])).dtype).toBe("fp16");
    // num_labels alone (no id2label) says it too
    const { id2label: _a, label2id: _b, ...bare } = msMarco;
    expect(readRerankerFolder(folder({ ...bare, num_labels: 1 }))).toMatchObject({ logits: 1, labels: { 0: "LABEL_0" } });
  });

  test.each([
    ["LABEL_0 / LABEL_1", { 0: "LABEL_0", 1: "LABEL_1" }, 1],
    ["irrelevant / relevant", { 0: "irrelevant", 1: "relevant" }, 1],
    ["Positive first", { 0: "Positive", 1: "Negative" }, 0],
    ["yes / no", { 0: "no", 1: "yes" }, 1],
  ])("two labels, the positive one named (%s)", (_, id2label, positive) => {
    expect(readRerankerFolder(folder({ ...msMarco, id2label, label2id: undefined }))).toMatchObject({ logits: 2, positive });
  });

  test.each([
    ["no config.json", folder(undefined), "no config.json"],
    ["no tokenizer.json", folder(msMarco, ["model.onnx"], false), "no tokenizer.json"],
    ["no ONNX weights", folder(msMarco, []), "no onnx/model.onnx"],
    ["an embedder's architecture", folder({ ...msMarco, architectures: ["BertModel"] }), "is not a sequence classifier"],
    ["no labels at all", folder({ ...msMarco, id2label: undefined, label2id: undefined }), "neither id2label nor num_labels"],
    ["three NLI labels", folder({ ...msMarco, id2label: { 0: "contradiction", 1: "entailment", 2: "neutral" }, label2id: undefined }), "has 3 labels"],
    ["two labels, neither named positive", folder({ ...msMarco, id2label: { 0: "cat", 1: "dog" }, label2id: undefined }), "cannot tell which of the two labels means relevant"],
    ["two labels, both named positive", folder({ ...msMarco, id2label: { 0: "relevant", 1: "LABEL_1" }, label2id: undefined }), "cannot tell which of the two labels means relevant"],
    ["num_labels against id2label", folder({ ...msMarco, num_labels: 2 }), "num_labels 2 disagrees with id2label's 1 labels"],
    ["label ids not 0…n-1", folder({ ...msMarco, id2label: { 1: "LABEL_1" }, label2id: undefined }), "ids must be 0…0"],
  ])("refuses a folder with %s, naming the problem", (_, dir, message) => {
    expect(() => readRerankerFolder(dir)).toThrow(message);
  });
});

describe("isRerankerConfig", () => {
  test.each([
    ["an ms-marco cross-encoder is one", msMarco, true],
    ["bge-reranker-v2-m3 is one", bgeM3, true],
    ["one label and no architectures is one", { id2label: { 0: "LABEL_0" } }, true],
    ["num_labels 1 is one", { architectures: ["BertForSequenceClassification"], num_labels: 1 }, true],
    ["an NLI classifier is not", { ...msMarco, id2label: { 0: "contradiction", 1: "entailment", 2: "neutral" } }, false],
    ["two labels are not (kind = \"reranker\" is declared, not guessed)", { ...msMarco, id2label: { 0: "LABEL_0", 1: "LABEL_1" } }, false],
    ["an embedder is not", { architectures: ["BertModel"] }, false],
    ["an embedder with one label is not", { architectures: ["BertModel"], id2label: { 0: "LABEL_0" } }, false],
  ] as const)("%s", (_, config, expected) => {
    expect(isRerankerConfig(config)).toBe(expected);
  });
});
