import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { cpSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { AutoTokenizer } from "@huggingface/transformers";
import { ensureOnnxModel, ensureOnnxModelSpec } from "../../../models/onnx/cache";
import { ONNX_PRESETS } from "../../../models/onnx/presets";
import { validateConfig } from "../../../src/lib/config";
import { memoryLogger } from "../../../src/lib/log";
import { profileModel } from "../../../src/3-engines/planner/profile";
import { transformersFactories } from "../../../src/3-engines/transformers/factory";
import type { TransformersRerankerEngine } from "../../../src/3-engines/transformers/reranker-engine";
import { RerankQueryTooLong } from "../../../src/3-engines/types";
import { tempDir } from "../../helpers/app";
import { bareReranker, type BareReranker } from "../../helpers/rerank-reference";

// The reranker engine on the generated cross-encoder (ms-marco-MiniLM layout, one logit): its
// pairs against the tokenizer's own pair template, its relevance against a bare onnxruntime
// session with the sigmoid computed here, and the cut of long documents.

const tmp = tempDir("rerank-engine-");
let folder: string;
let engine: TransformersRerankerEngine;
let bare: BareReranker;
let tokenizer: Awaited<ReturnType<typeof AutoTokenizer.from_pretrained>>;
let vocab: Record<string, number>;

function makeEngine(model: string, maxContext = 512, batch?: { maxDelayMs?: number }) {
  const config = validateConfig({ engines: { device: "cpu", threads: 1 } });
  const m = validateConfig({ models: [{ id: "r", name: "r", kind: "reranker", files: { model }, max_context: maxContext }] }).models[0]!;
  return transformersFactories(config, memoryLogger(), { batch }).reranker!(m, () => model) as TransformersRerankerEngine;
}

beforeAll(async () => {
  folder = await ensureOnnxModel("rerank");
  engine = makeEngine(folder);
  await engine.load();
  bare = await bareReranker(folder);
  tokenizer = await AutoTokenizer.from_pretrained(folder, { local_files_only: true });
  vocab = JSON.parse(readFileSync(join(folder, "tokenizer.json"), "utf8")).model.vocab;
});
afterAll(async () => {
  await engine.unload();
  await bare.close();
  rmSync(tmp, { recursive: true, force: true });
});

const query = "how many people live in berlin";
const documents = [
  "Berlin has a population of 3,520,031 registered inhabitants in an area of 891.82 square kilometers.",
  "New York City is famous for the Metropolitan Museum of Art.",
  "A man is playing a guitar.",
  "",
];

/** `n` words of the generated vocabulary, each one token on its own. */
function words(n: number, from = 200): string {
  const w = Object.keys(vocab).filter((t) => /^[a-z]{3,}$/.test(t));
  return Array.from({ length: n }, (_, i) => w[(from + i) % w.length]).join(" ");
}

/** The tokenizer's own pair, as Python's tokenizer(query, document) gives it. */
function reference(q: string, d: string) {
  const enc = tokenizer(q, { text_pair: d, return_tensor: false, return_token_type_ids: true });
  return { ids: enc.input_ids as number[], typeIds: enc.token_type_ids as number[] };
}

describe("tokenizePairs", () => {
  test("each pair is the tokenizer's own (query, document) template: [CLS] query [SEP] document [SEP], segments 0…0 1…1", async () => {
    const pairs = await engine.tokenizePairs(query, documents.slice(0, 3));
    pairs.forEach((p, i) => {
      expect(p).toEqual({ ...reference(query, documents[i]!), cut: 0 });
      expect(p.ids[0]).toBe(vocab["[CLS]"]!);
      expect(p.ids.filter((id) => id === vocab["[SEP]"])).toHaveLength(2);
    });
  });

  test("an empty document is an empty second sequence ([CLS] query [SEP] [SEP]), not the query alone", async () => {
    const [p] = await engine.tokenizePairs(query, [""]);
    const q = tokenizer.encode(query, { add_special_tokens: false });
    expect(p!.ids).toEqual([vocab["[CLS]"]!, ...q, vocab["[SEP]"]!, vocab["[SEP]"]!]);
    expect(p!.typeIds).toEqual([...Array(q.length + 2).fill(0), 1]);
    expect(p!.cut).toBe(0);
  });

  test("a long document is cut from its end: the pair is exactly maxTokens, the query and special tokens kept, the cut counted", async () => {
    const long = words(600);
    const full = reference(query, long);
    expect(full.ids.length).toBeGreaterThan(512);
    const [p] = await engine.tokenizePairs(query, [long]);
    expect(p!.ids).toHaveLength(512);
    expect(p!.cut).toBe(full.ids.length - 512);
    // The same as the tokenizer gives for the document's first words (one token each).
    const kept = long.split(" ").slice(0, 600 - p!.cut).join(" ");
    expect(p).toEqual({ ...reference(query, kept), cut: p!.cut });
    expect(p!.ids.at(-1)).toBe(vocab["[SEP]"]!);

    // A smaller limit per call; documents that fit are left whole.
    const [short, cut] = await engine.tokenizePairs(query, ["a short one", words(40)], 24);
    expect(short).toEqual({ ...reference(query, "a short one"), cut: 0 });
    expect(cut!.ids).toHaveLength(24);
    const q = tokenizer.encode(query, { add_special_tokens: false }).length;
    expect(cut!.cut).toBe(40 - (24 - q - 3));
    expect(cut).toEqual({ ...reference(query, words(24 - q - 3)), cut: 40 - (24 - q - 3) });
  });

  test("the manifest's max_context below the folder's limit is the engine's maxTokens", async () => {
    expect(engine.maxTokens).toBe(512);
    const tight = makeEngine(folder, 20);
    expect(tight.maxTokens).toBe(20);
    const [p] = await tight.tokenizePairs("a", [words(50)]);
    expect(p!.ids).toHaveLength(20);
    expect(p!.cut).toBe(50 - (20 - 1 - 3));
    await tight.unload();
  });

  test("a query that leaves no room for one document token throws RerankQueryTooLong; one that leaves one token is served", async () => {
    const q = words(20, 50);
    const queryTokens = tokenizer.encode(q, { add_special_tokens: false }).length + 3;
    expect(queryTokens).toBe(23);
    const err = await engine.tokenizePairs(q, ["whatever"], 23).catch((e) => e);
    expect(err).toBeInstanceOf(RerankQueryTooLong);
    expect(err).toMatchObject({ queryTokens: 23, maxTokens: 23 });
    const [p] = await engine.tokenizePairs(q, [words(5)], 24);
    expect(p!.ids).toHaveLength(24);
    expect(p!.cut).toBe(4);
    expect(p!.ids.at(-2)).toBe(tokenizer.encode(words(1), { add_special_tokens: false })[0]!);
    // An empty document still fits the query alone.
    const [e] = await engine.tokenizePairs(q, [""], 24);
    expect(e!.ids).toHaveLength(23);
  });

  test("many long documents are tokenized in slices: the event loop keeps turning", async () => {
    let ticks = 0;
    const timer = setInterval(() => ticks++, 1);
    const pairs = await engine.tokenizePairs(query, Array.from({ length: 300 }, (_, i) => words(700, i)));
    clearInterval(timer);
    expect(pairs).toHaveLength(300);
    expect(pairs.every((p) => p.ids.length === 512 && p.cut > 0)).toBe(true);
    expect(ticks).toBeGreaterThan(0);
  });
});

describe("rerank", () => {
  test("relevance is the sigmoid of the model's one logit, as a bare onnxruntime session gives it", async () => {
    const pairs = await engine.tokenizePairs(query, [...documents, words(700)]);
    const scores = await engine.rerank(pairs);
    for (const [i, p] of pairs.entries()) {
      const [logit] = await bare.logits(p);
      expect(Math.abs(scores[i]! - 1 / (1 + Math.exp(-logit!)))).toBeLessThan(1e-5);
      expect(scores[i]).toBeGreaterThan(0);
      expect(scores[i]).toBeLessThan(1);
    }
    // The documents are told apart (random weights, but the pair reaches the model).
    expect(new Set(scores.map((s) => s.toFixed(6))).size).toBe(scores.length);
  });

  test("a batch gives each pair what it gets alone, and concurrent requests share model runs", async () => {
    const pairs = await engine.tokenizePairs(query, [...documents, words(30), words(300), words(5)]);
    const together = await engine.rerank(pairs);
    const alone: number[] = [];
    for (const p of pairs) alone.push(...(await engine.rerank([p])));
    together.forEach((s, i) => expect(Math.abs(s - alone[i]!)).toBeLessThan(1e-5));
    expect(Math.max(...together.map((s, i) => Math.abs(s - alone[i]!)))).toBeLessThan(1e-5);

    const batched = makeEngine(folder, 512, { maxDelayMs: 50 });
    await batched.load();
    const runs = batched.runs;
    const answers = await Promise.all(pairs.map((p) => batched.rerank([p])));
    expect(batched.runs - runs).toBeLessThan(pairs.length);
    answers.forEach(([s], i) => expect(Math.abs(s! - alone[i]!)).toBeLessThan(1e-5));
    await batched.unload();
  });

  test("segment ids reach the model: the same ids as one segment score differently", async () => {
    const [p] = await engine.tokenizePairs(query, [documents[0]!]);
    const [a, b] = await engine.rerank([p!, { ids: p!.ids }]);
    expect(Math.abs(a! - b!)).toBeGreaterThan(1e-4);
  });
});

describe("other layouts", () => {
  /** A copy of the generated folder with config.json and tokenizer.json edited. */
  function variant(name: string, edit: { config?: (c: any) => void; tokenizer?: (t: any) => void; tokenizerConfig?: (t: any) => void }) {
    const dir = join(tmp, name);
    cpSync(folder, dir, { recursive: true });
    const rewrite = (file: string, f?: (v: any) => void) => {
      if (!f) return;
      const v = JSON.parse(readFileSync(join(dir, file), "utf8"));
      f(v);
      writeFileSync(join(dir, file), JSON.stringify(v));
    };
    rewrite("config.json", edit.config);
    rewrite("tokenizer.json", edit.tokenizer);
    rewrite("tokenizer_config.json", edit.tokenizerConfig);
    return dir;
  }

  test("XLM-RoBERTa's layout (bge-reranker-v2-m3): <s> query </s></s> document </s>, no segment ids, cut before the last </s>", async () => {
    const dir = variant("xlmr", {
      config: (c) => {
        c.model_type = "xlm-roberta";
        c.architectures = ["XLMRobertaForSequenceClassification"];
        c.type_vocab_size = 1;
        c.pad_token_id = 1;
        c.max_position_embeddings = 42; // 40 tokens after RoBERTa's position offset (pad_token_id + 1)
      },
      tokenizer: (t) => {
        t.post_processor = { type: "RobertaProcessing", sep: ["[SEP]", vocab["[SEP]"]], cls: ["[CLS]", vocab["[CLS]"]], trim_offsets: true, add_prefix_space: true };
      },
      tokenizerConfig: (t) => {
        t.tokenizer_class = "XLMRobertaTokenizer";
        t.model_max_length = 8192;
      },
    });
    const e = makeEngine(dir);
    expect(e.maxTokens).toBe(40);
    const q = tokenizer.encode(query, { add_special_tokens: false });
    const [whole, cut, empty] = await e.tokenizePairs(query, ["a short one", words(60), ""]);
    const cls = vocab["[CLS]"]!;
    const sep = vocab["[SEP]"]!;
    expect(whole).toEqual({ ids: [cls, ...q, sep, sep, ...tokenizer.encode("a short one", { add_special_tokens: false }), sep], cut: 0 });
    const keep = 40 - q.length - 4;
    expect(cut).toEqual({ ids: [cls, ...q, sep, sep, ...tokenizer.encode(words(keep), { add_special_tokens: false }), sep], cut: 60 - keep });
    expect(empty).toEqual({ ids: [cls, ...q, sep, sep, sep], cut: 0 });
    // Scored with token_type_ids all 0, as a bare session fed no segment ids.
    const scores = await e.rerank([whole!, cut!]);
    const expected = await bare.score([whole!, cut!]);
    scores.forEach((s, i) => expect(Math.abs(s - expected[i]!)).toBeLessThan(1e-5));
    await e.unload();
  });

  test("two labels: the relevance is the positive label's softmax probability, whichever its index", async () => {
    // The generated cross-encoder with two logits (a graph of its own), its labels named.
    const two = await ensureOnnxModelSpec("rerank-two", { ...ONNX_PRESETS.rerank, labels: ["relevant", "irrelevant"], seed: 15 }, tmp);
    const e = makeEngine(two);
    expect(e.describe()).toMatchObject({ logits: 2, positive: 0 });
    const pairs = await e.tokenizePairs(query, documents);
    const scores = await e.rerank(pairs);
    const ref = await bareReranker(two);
    for (const [i, p] of pairs.entries()) {
      const [relevant, irrelevant] = await ref.logits(p);
      const expected = Math.exp(relevant!) / (Math.exp(relevant!) + Math.exp(irrelevant!));
      expect(Math.abs(scores[i]! - expected)).toBeLessThan(1e-5);
    }
    // The reference's own padded batches agree with it.
    (await ref.score(pairs, { batch: 3 })).forEach((r, i) => expect(Math.abs(r - scores[i]!)).toBeLessThan(1e-5));
    await ref.close();
    await e.unload();

    // A config that says two labels over a graph that gives one is an error at run, never a score.
    const mismatch = makeEngine(variant("two-of-one", { config: (c) => ((c.id2label = { 0: "LABEL_0", 1: "LABEL_1" }), (c.label2id = { LABEL_0: 0, LABEL_1: 1 })) }));
    expect(mismatch.describe()).toMatchObject({ logits: 2, positive: 1 });
    const [p] = await mismatch.tokenizePairs(query, ["x"]);
    const failed = await mismatch.rerank([p!]).then(
      () => null,
      (x: Error) => x,
    );
    expect(failed?.message).toContain("the model's logits are [batch, 1], its config.json says 2");
    await mismatch.unload();
  });

  test("a folder that is not a cross-encoder is refused at load", async () => {
    const e = makeEngine(variant("nli-labels", { config: (c) => (c.id2label = { 0: "neutral", 1: "contradiction", 2: "entailment" }) }));
    await expect(e.load()).rejects.toThrow("has 3 labels");
    expect(e.loaded).toBe(false);
  });
});

test("the planner profiles the reranker's folder: its limit, weights and a footprint", async () => {
  const m = validateConfig({ models: [{ id: "r", name: "r", kind: "reranker", files: { model: folder }, max_context: 512 }] }).models[0]!;
  const p = await profileModel(m, () => folder);
  expect(p.kind).toBe("reranker");
  expect(p.trainedContext).toBe(512);
  expect(p.fileBytes).toBeGreaterThan(0);
  const f = await p.footprint({ device: "cpu", contextSize: 512, gpuLayers: 0, slots: 1 });
  expect(f.cpuMb).toBeGreaterThan(0);
});
