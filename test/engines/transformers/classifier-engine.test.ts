import type { TokenizedItem } from "../../../src/3-engines/types";
import { afterAll, beforeAll, expect, test } from "bun:test";
import { cpSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import * as ort from "onnxruntime-node";
import { ensureOnnxModel } from "../../../models/onnx/cache";
import { validateConfig } from "../../../src/lib/config";
import type { TransformersClassifierEngine } from "../../../src/3-engines/transformers/classifier-engine";
import { transformersFactories } from "../../../src/3-engines/transformers/factory";
import { memoryLogger } from "../../../src/lib/log";
import { tempDir } from "../../helpers/app";

let folder: string;
let engine: TransformersClassifierEngine;
const tmp = tempDir("nli-engine-");

function makeEngine(model: string) {
  const config = validateConfig({ engines: { device: "cpu", threads: 1 } });
  const m = validateConfig({ models: [{ id: "c", name: "c", kind: "classifier", files: { model }, max_context: 4096 }] }).models[0]!;
  return transformersFactories(config, memoryLogger()).classifier!(m, () => model) as TransformersClassifierEngine;
}

beforeAll(async () => {
  folder = await ensureOnnxModel("nli");
  engine = makeEngine(folder);
  await engine.load();
});
afterAll(async () => {
  await engine.unload();
  rmSync(tmp, { recursive: true, force: true });
});

const pair = { premise: "A man is playing a guitar.", hypothesis: "Nobody is playing music." };

/** The model's own output for one sequence, straight from onnxruntime: softmax in id2label order. */
async function rawProbs(ids: number[], types: number[]): Promise<number[]> {
  const session = await ort.InferenceSession.create(join(folder, "onnx", "model.onnx"), { executionProviders: ["cpu"], intraOpNumThreads: 1 });
  const t = (v: number[]) => new ort.Tensor("int64", BigInt64Array.from(v, BigInt), [1, v.length]);
  const out = await session.run({ input_ids: t(ids), attention_mask: t(ids.map(() => 1)), token_type_ids: t(types) });
  const logits = Array.from(out.logits!.data as Float32Array);
  const e = logits.map((x) => Math.exp(x - Math.max(...logits)));
  return e.map((x) => x / e.reduce((a, b) => a + b, 0));
}

test("a pair goes through the tokenizer's pair template: [CLS] premise [SEP] hypothesis [SEP]", async () => {
  const [{ ids, typeIds }] = (await engine.tokenize([pair])) as [TokenizedItem];
  const [premise] = await engine.tokenize([{ text: pair.premise }]);
  const [hypothesis] = await engine.tokenize([{ text: pair.hypothesis }]);
  // [CLS] = 2, [SEP] = 3 in the generated vocabulary.
  expect(ids).toEqual([...premise!.ids, ...hypothesis!.ids.slice(1)]);
  expect(ids[0]).toBe(2);
  expect(ids.filter((id) => id === 3)).toHaveLength(2);
  const sep = ids.indexOf(3);
  expect(typeIds).toEqual(ids.map((_, i) => (i > sep ? 1 : 0)));
  expect(premise!.typeIds).toBeUndefined();
});

test("probabilities are the model's softmax, remapped from its id2label order to [contradiction, entailment, neutral]", async () => {
  const id2label = JSON.parse(readFileSync(join(folder, "config.json"), "utf8")).id2label;
  expect(id2label).toEqual({ 0: "neutral", 1: "contradiction", 2: "entailment" });
  const [item] = await engine.tokenize([pair]);
  const [probs] = await engine.classify([item!]);
  const ids = item!.ids;
  const sep = ids.indexOf(3);
  const raw = await rawProbs(ids, ids.map((_, i) => (i > sep ? 1 : 0)));
  const expected = [raw[1]!, raw[2]!, raw[0]!];
  probs!.forEach((p, k) => expect(p).toBeCloseTo(expected[k]!, 6));
  expect(probs!.reduce((a, b) => a + b, 0)).toBeCloseTo(1, 9);
  // The raw order differs from the API's, so remapping is visible.
  expect(raw.map((p) => p.toFixed(6))).not.toEqual(probs!.map((p) => p.toFixed(6)));
});

test("token_type_ids reach the model: the same ids as one segment score differently", async () => {
  const [asPair] = await engine.tokenize([pair]);
  const [asText] = await engine.tokenize([{ text: `${pair.premise} [SEP] ${pair.hypothesis}` }]);
  expect(asText!.ids).toEqual(asPair!.ids);
  const [a, b] = await engine.classify([asPair!, asText!]);
  expect(a).not.toEqual(b!);
});

test("a model whose labels are not exactly entailment, contradiction and neutral is refused at load", async () => {
  const other = join(tmp, "two-labels");
  cpSync(folder, other, { recursive: true });
  const config = JSON.parse(readFileSync(join(other, "config.json"), "utf8"));
  config.id2label = { 0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2" };
  writeFileSync(join(other, "config.json"), JSON.stringify(config));
  const e = makeEngine(other);
  await expect(e.load()).rejects.toThrow("id2label must be exactly entailment, contradiction and neutral");
  expect(e.loaded).toBe(false);
});
