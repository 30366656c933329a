import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type OpenAI from "openai";
import { decodeBase64Floats, norm, onnxTestApp, type OnnxTestApp } from "../../helpers/onnx";

let t: OnnxTestApp;
let client: OpenAI;
beforeAll(async () => {
  t = await onnxTestApp();
  client = t.openai(await t.key({ creditUsd: 5 }));
});
afterAll(() => t.close());

const SENTENCES = ["A man is playing a guitar.", "The cat is sleeping on the sofa.", "It rained all day."];

describe("vectors", () => {
  test("float vectors are 384-dimension, unit-norm, in OpenAI's list shape with usage", async () => {
    const r = await client.embeddings.create({ model: "embed", input: SENTENCES, encoding_format: "float" });
    expect(r.object).toBe("list");
    expect(r.model).toBe("embed");
    expect(r.data.map((d) => [d.object, d.index])).toEqual([
      ["embedding", 0],
      ["embedding", 1],
      ["embedding", 2],
    ]);
    for (const d of r.data) {
      expect(d.embedding).toHaveLength(384);
      expect(norm(d.embedding)).toBeCloseTo(1, 5);
    }
    expect(r.usage.prompt_tokens).toBeGreaterThan(3 * 2);
    expect(r.usage.total_tokens).toBe(r.usage.prompt_tokens);
  });

  test("base64 is the little-endian float32 bytes of the float vectors", async () => {
    const key = await t.key({ creditUsd: 1 });
    const body = { model: "embed", input: SENTENCES };
    const floats = await (await t.request("POST", "/v1/embeddings", { key, body: { ...body, encoding_format: "float" } })).json();
    const b64 = await (await t.request("POST", "/v1/embeddings", { key, body: { ...body, encoding_format: "base64" } })).json();
    expect(typeof b64.data[0].embedding).toBe("string");
    for (let i = 0; i < SENTENCES.length; i++) expect(decodeBase64Floats(b64.data[i].embedding)).toEqual(floats.data[i].embedding);
  });

  test("the SDK's default request (base64 on the wire) decodes to the same vectors", async () => {
    const decoded = await client.embeddings.create({ model: "embed", input: SENTENCES });
    const floats = await client.embeddings.create({ model: "embed", input: SENTENCES, encoding_format: "float" });
    expect(decoded.data.map((d) => d.embedding)).toEqual(floats.data.map((d) => d.embedding));
  });

  test("the same input gives the same vector, alone or among others, and different inputs differ", async () => {
    const alone = await client.embeddings.create({ model: "embed", input: SENTENCES[1]!, encoding_format: "float" });
    const among = await client.embeddings.create({ model: "embed", input: [...SENTENCES, "a much longer sentence ".repeat(20)], encoding_format: "float" });
    const a = alone.data[0]!.embedding;
    const b = among.data[1]!.embedding;
    expect(Math.max(...a.map((x, i) => Math.abs(x - b[i]!)))).toBeLessThan(1e-5);
    expect(among.data[0]!.embedding).not.toEqual(a);
  });

  test("token arrays are accepted as one input or many, with the template's special tokens added", async () => {
    const key = await t.key({ creditUsd: 1 });
    const embedder = t.embedder();
    const [ids] = await embedder.tokenize(["the cat is sleeping"]);
    const inner = ids!.slice(1, -1);
    const text = await (await t.request("POST", "/v1/embeddings", { key, body: { model: "embed", input: "the cat is sleeping", encoding_format: "float" } })).json();
    const one = await (await t.request("POST", "/v1/embeddings", { key, body: { model: "embed", input: inner, encoding_format: "float" } })).json();
    const many = await (await t.request("POST", "/v1/embeddings", { key, body: { model: "embed", input: [inner, inner.slice(0, 2)], encoding_format: "float" } })).json();
    expect(one.data).toHaveLength(1);
    expect(one.data[0].embedding).toEqual(text.data[0].embedding);
    expect(one.usage.prompt_tokens).toBe(ids!.length);
    expect(many.data).toHaveLength(2);
    expect(many.data[0].embedding).toEqual(text.data[0].embedding);
    expect(many.usage.prompt_tokens).toBe(ids!.length + 4);
  });

  test("dimensions equal to the model's own and a user field are accepted", async () => {
    const r = await client.embeddings.create({ model: "embed", input: "hello", dimensions: 384, user: "u-1", encoding_format: "float" });
    expect(r.data[0]!.embedding).toHaveLength(384);
  });
});

describe("billing", () => {
  test("a premium request leaves one usage row with the endpoint, tokens and the embedding price", async () => {
    const key = await t.key({ creditUsd: 1 });
    const res = await t.request("POST", "/v1/embeddings", { key, body: { model: "embed", input: SENTENCES } });
    const body = await res.json();
    const row = t.usageRow(res.headers.get("x-request-id")!)!;
    expect(row.endpoint).toBe("/v1/embeddings");
    expect(row.model).toBe("embed");
    expect(row.input_tokens).toBe(body.usage.prompt_tokens);
    expect(row.output_tokens).toBe(0);
    // Default embedding price $0.02 per million input tokens, rounded up to a micro-dollar.
    expect(row.cost_micros).toBe(Math.ceil((body.usage.prompt_tokens * 0.02 * 1e6) / 1e6));
  });

  test("a free key spends its token trial by the input tokens", async () => {
    const key = await t.key({ kind: "free", account: "embed-trial" });
    const res = await t.request("POST", "/v1/embeddings", { key, body: { model: "embed", input: SENTENCES } });
    expect(res.status).toBe(200);
    const used = t.deps.db!.query<{ trial_tokens_used: number }, []>("SELECT trial_tokens_used FROM accounts WHERE name = 'embed-trial'").get()!;
    expect(used.trial_tokens_used).toBe((await res.json()).usage.prompt_tokens);
  });
});

describe("micro-batching", () => {
  test("concurrent requests share model runs and each gets its own vectors", async () => {
    const key = await t.key({ creditUsd: 1 });
    const inputs = Array.from({ length: 12 }, (_, i) => `request number ${i} is about ${SENTENCES[i % 3]}`);
    const serial: number[][] = [];
    for (const input of inputs)
      serial.push((await (await t.request("POST", "/v1/embeddings", { key, body: { model: "embed", input, encoding_format: "float" } })).json()).data[0].embedding);
    const before = t.embedder().runs;
    const concurrent = await Promise.all(
      inputs.map(async (input) => (await (await t.request("POST", "/v1/embeddings", { key, body: { model: "embed", input, encoding_format: "float" } })).json()).data[0].embedding as number[]),
    );
    expect(t.embedder().runs - before).toBeLessThan(inputs.length);
    concurrent.forEach((v, i) => expect(Math.max(...v.map((x, k) => Math.abs(x - serial[i]![k]!)))).toBeLessThan(1e-5));
  });
});
