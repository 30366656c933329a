import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { onnxTestApp, type OnnxTestApp } from "../../helpers/onnx";

let t: OnnxTestApp;
let key: string;
beforeAll(async () => {
  t = await onnxTestApp();
  key = await t.key({ creditUsd: 5 });
});
afterAll(() => t.close());

const PAIRS = [
  { premise: "A man is playing a guitar on the street.", hypothesis: "Nobody is playing music." },
  { premise: "A man is playing a guitar on the street.", hypothesis: "A person is outside." },
  { premise: "The cat is sleeping on the sofa.", hypothesis: "The cat is awake." },
];

async function classify(body: Record<string, unknown>, k = key) {
  const res = await t.request("POST", "/v1/classify", { key: k, body: { model: "nli", ...body } });
  expect(res.status).toBe(200);
  return { body: await res.json(), requestId: res.headers.get("x-request-id")! };
}

describe("results", () => {
  test("pairs come back as a list of three-class results in the request's order, with usage", async () => {
    const { body } = await classify({ pairs: PAIRS });
    expect(body.object).toBe("list");
    expect(body.model).toBe("nli");
    expect(body.data.map((d: any) => d.index)).toEqual([0, 1, 2]);
    for (const d of body.data) {
      expect(d.num_classes).toBe(3);
      expect(d.probs).toHaveLength(3);
      expect(d.probs.reduce((a: number, b: number) => a + b, 0)).toBeCloseTo(1, 9);
      expect(["contradiction", "entailment", "neutral"]).toContain(d.label);
      // The label is the most probable class in the fixed [contradiction, entailment, neutral] order.
      expect(d.label).toBe(["contradiction", "entailment", "neutral"][d.probs.indexOf(Math.max(...d.probs))]);
    }
    expect(body.usage.prompt_tokens).toBeGreaterThan(PAIRS.length * 3);
    expect(body.usage.total_tokens).toBe(body.usage.prompt_tokens);
    expect(body.usage.completion_tokens).toBe(0);
  });

  test("different pairs, and a pair with its sides swapped, give different probabilities", async () => {
    const { body } = await classify({ pairs: [...PAIRS, { premise: PAIRS[0]!.hypothesis, hypothesis: PAIRS[0]!.premise }] });
    const probs = body.data.map((d: any) => d.probs.join());
    expect(new Set(probs).size).toBe(4);
  });

  test("the same request gives the same answer", async () => {
    const a = await classify({ pairs: PAIRS });
    const b = await classify({ pairs: PAIRS });
    expect(b.body.data).toEqual(a.body.data);
  });

  test("pairs use the tokenizer's pair template, not string concatenation", async () => {
    const [p] = PAIRS;
    const pair = (await classify({ pairs: [p] })).body;
    const concatenated = (await classify({ input: [`${p!.premise} ${p!.hypothesis}`] })).body;
    // Same ids as the pair ([CLS] p [SEP] h [SEP]) but all of segment 0: only token_type_ids differ.
    const sameIds = (await classify({ input: [`${p!.premise} [SEP] ${p!.hypothesis}`] })).body;
    expect(pair.usage.prompt_tokens).toBe(concatenated.usage.prompt_tokens + 1);
    expect(pair.usage.prompt_tokens).toBe(sameIds.usage.prompt_tokens);
    expect(pair.data[0].probs).not.toEqual(concatenated.data[0].probs);
    expect(pair.data[0].probs).not.toEqual(sameIds.data[0].probs);
  });

  test("raw input strings are classified as given, in the spec's Premise/Hypothesis format or any other", async () => {
    const { body } = await classify({ input: ["Premise: the sky is blue.\nHypothesis: it is a sunny day.", "just one sentence"] });
    expect(body.data).toHaveLength(2);
    expect(body.data[1].index).toBe(1);
  });
});

describe("billing", () => {
  test("a premium request is billed at $0.05 per million input tokens, nothing for output", async () => {
    const { body, requestId } = await classify({ pairs: PAIRS });
    const row = t.usageRow(requestId)!;
    expect(row.endpoint).toBe("/v1/classify");
    expect(row.model).toBe("nli");
    expect(row.input_tokens).toBe(body.usage.prompt_tokens);
    expect(row.output_tokens).toBe(0);
    expect(row.cost_micros).toBe(Math.ceil(body.usage.prompt_tokens * 0.05));
  });

  test("a big request costs exactly its tokens at the classifier price", async () => {
    const pairs = Array.from({ length: 256 }, (_, i) => ({ premise: `sentence ${i} `.repeat(8), hypothesis: "a person is outside" }));
    const { body, requestId } = await classify({ pairs });
    expect(body.data).toHaveLength(256);
    expect(t.usageRow(requestId)!.cost_micros).toBe(Math.ceil(body.usage.prompt_tokens * 0.05));
  });

  test("a free key spends its token trial by the input tokens", async () => {
    const free = await t.key({ kind: "free", account: "nli-trial" });
    const { body } = await classify({ pairs: PAIRS }, free);
    const used = t.deps.db!.query<{ trial_tokens_used: number }, []>("SELECT trial_tokens_used FROM accounts WHERE name = 'nli-trial'").get()!;
    expect(used.trial_tokens_used).toBe(body.usage.prompt_tokens);
  });
});

test("concurrent requests share model runs and each gets its own results", async () => {
  const serial: number[][] = [];
  for (const p of PAIRS) serial.push((await classify({ pairs: [p] })).body.data[0].probs);
  const before = t.classifier().runs;
  const concurrent = await Promise.all(PAIRS.map(async (p) => (await classify({ pairs: [p] })).body.data[0].probs));
  expect(t.classifier().runs - before).toBeLessThan(PAIRS.length);
  concurrent.forEach((probs, i) => probs.forEach((x: number, k: number) => expect(x).toBeCloseTo(serial[i]![k]!, 6)));
});
