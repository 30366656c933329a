import { afterAll, beforeAll, expect, test } from "bun:test";
import OpenAI from "openai";
import { onnxTestApp, type OnnxTestApp } from "../../helpers/onnx";

let t: OnnxTestApp;
let key: string;
beforeAll(async () => {
  t = await onnxTestApp();
  key = await t.key({ creditUsd: 5 });
});
afterAll(() => t.close());

async function refused(body: Record<string, unknown>, status = 400) {
  const res = await t.request("POST", "/v1/embeddings", { key, body });
  expect(res.status).toBe(status);
  const e = (await res.json()).error;
  expect(typeof e.message).toBe("string");
  return { ...e, requestId: res.headers.get("x-request-id")! };
}

test("an input over the model's length is 400 context_length_exceeded naming its index, never truncated", async () => {
  const long = "word ".repeat(600);
  const e = await refused({ model: "embed", input: ["short", "also short", "fine", long] });
  expect(e.code).toBe("context_length_exceeded");
  expect(e.param).toBe("input[3]");
  expect(e.message).toContain("at most 512 tokens");
  expect(t.usageRow(e.requestId)).toBeNull();
});

test("the manifest's max_context caps the model's own length, and a single string is named input", async () => {
  const e = await refused({ model: "embed-tight", input: "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen" });
  expect(e.param).toBe("input");
  expect(e.message).toContain("at most 16 tokens");
});

test("empty inputs are refused by name, as OpenAI does", async () => {
  expect((await refused({ model: "embed", input: "" })).param).toBe("input");
  expect((await refused({ model: "embed", input: [] })).param).toBe("input");
  expect((await refused({ model: "embed", input: ["ok", ""] })).param).toBe("input[1]");
  expect((await refused({ model: "embed", input: [[5, 6], []] })).param).toBe("input[1]");
});

test("more than 2048 inputs is 400 naming input", async () => {
  const e = await refused({ model: "embed", input: Array.from({ length: 2049 }, () => "x") });
  expect(e.param).toBe("input");
  expect(e.message).toContain("at most 2048");
});

test("dimensions other than the model's 384 is 400 naming dimensions", async () => {
  const e = await refused({ model: "embed", input: "hello", dimensions: 256 });
  expect(e.param).toBe("dimensions");
  expect(e.message).toContain("384");
});

test("token ids outside the vocabulary and mixed arrays are 400 naming the input", async () => {
  expect((await refused({ model: "embed", input: [[1, 2], [5, 99999999]] })).param).toBe("input[1]");
  expect((await refused({ model: "embed", input: ["text", 5] })).param).toBe("input[1]");
  // (the one token array that fails names its element: the value matched the array-of-tokens shape)
  expect((await refused({ model: "embed", input: [-1] })).param).toBe("input[0]");
  expect((await refused({ model: "embed", input: [5, 99999999] })).param).toBe("input");
});

test("bad bodies are 400 naming the field", async () => {
  expect((await refused({ model: "embed", input: "x", encoding_format: "int8" })).param).toBe("encoding_format");
  expect((await refused({ model: "embed", input: 5 })).param).toBe("input");
  expect((await refused({ input: "x" })).param).toBe("model");
});

test("an unknown model is 404 model not found through the SDK", async () => {
  const err = await t.openai(key).embeddings.create({ model: "nope", input: "x" }).catch((e) => e);
  expect(err).toBeInstanceOf(OpenAI.NotFoundError);
  expect(err.code).toBe("model_not_found");
});

test("a model of another kind is 400 naming model", async () => {
  for (const model of ["nli", "chat"]) {
    const e = await refused({ model, input: "x" });
    expect(e.param).toBe("model");
    expect(e.message).toContain("cannot serve this endpoint");
  }
});

test("a client that leaves while its request waits harms nothing: dropped, not charged, nothing held; others are served", async () => {
  const long = (i: number) => `sentence ${i} `.repeat(60);
  const busy = t.request("POST", "/v1/embeddings", { key, body: { model: "embed", input: Array.from({ length: 32 }, (_, i) => long(i)) } });
  const controller = new AbortController();
  const leaving = t.app.handle(
    new Request("http://localhost/v1/embeddings", {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "embed", input: "I will not wait" }),
      signal: controller.signal,
    }),
  );
  setTimeout(() => controller.abort(), 20);
  const [done, left] = await Promise.all([busy, leaving]);
  expect(done.status).toBe(200);
  expect(left.status).toBe(499);
  expect(t.usageRow(left.headers.get("x-request-id")!)).toBeNull();
  expect(t.usageRow(done.headers.get("x-request-id")!)).not.toBeNull();
  expect(await t.deps.meter.held((await t.deps.accounts.authenticate(key))!.accountId)).toEqual({ micros: 0, tokens: 0 });
  expect((await t.request("POST", "/v1/embeddings", { key, body: { model: "embed", input: "still here" } })).status).toBe(200);
  expect(t.logs.filter((l) => l.msg === "unhandled error")).toEqual([]);
});
