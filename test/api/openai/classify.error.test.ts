import { afterAll, beforeAll, expect, test } from "bun:test";
import { onnxTestApp, type OnnxTestApp } from "../../helpers/onnx";

let t: OnnxTestApp;
let key: string;
beforeAll(async () => {
  t = await onnxTestApp();
  key = await t.key({ creditUsd: 5 });
});
afterAll(() => t.close());

const pair = { premise: "A man is playing a guitar.", hypothesis: "Nobody is playing music." };

async function refused(body: Record<string, unknown>, status = 400) {
  const res = await t.request("POST", "/v1/classify", { key, body });
  expect(res.status).toBe(status);
  const e = (await res.json()).error;
  expect(e.type).toBe("invalid_request_error");
  return { ...e, requestId: res.headers.get("x-request-id")! };
}

test("more than 256 items is 400 naming the list", async () => {
  expect((await refused({ model: "nli", pairs: Array.from({ length: 257 }, () => pair) })).param).toBe("pairs");
  const e = await refused({ model: "nli", input: Array.from({ length: 257 }, () => "x") });
  expect(e.param).toBe("input");
  expect(e.message).toContain("at most 256");
});

test("an item over 4,096 tokens is 400 context_length_exceeded naming its index, and nothing is billed", async () => {
  const e = await refused({ model: "nli", pairs: [pair, { premise: "word ".repeat(4100), hypothesis: "x" }] });
  expect(e.code).toBe("context_length_exceeded");
  expect(e.param).toBe("pairs[1]");
  expect(e.message).toContain("at most 4096 tokens");
  expect(t.usageRow(e.requestId)).toBeNull();
});

test("the model's own length (here its max_context of 24) applies when it is below 4,096", async () => {
  const e = await refused({ model: "nli-tight", input: ["short", "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty twenty-one"] });
  expect(e.param).toBe("input[1]");
  expect(e.message).toContain("at most 24 tokens");
});

test("pairs and input together, or neither, or an empty list, are 400", async () => {
  expect((await refused({ model: "nli", pairs: [pair], input: ["x"] })).message).toContain("either pairs or input");
  expect((await refused({ model: "nli" })).message).toContain("pairs or input is required");
  expect((await refused({ model: "nli", pairs: [] })).param).toBe("pairs");
  expect((await refused({ model: "nli", input: [] })).param).toBe("input");
});

test("empty strings are refused by name", async () => {
  expect((await refused({ model: "nli", input: ["ok", ""] })).param).toBe("input[1]");
  expect((await refused({ model: "nli", pairs: [pair, { premise: "x", hypothesis: "" }] })).param).toBe("pairs[1].hypothesis");
});

test("bad bodies are 400 naming the field", async () => {
  expect((await refused({ model: "nli", pairs: [{ premise: "x" }] })).param).toBe("pairs[0].hypothesis");
  expect((await refused({ model: "nli", input: [5] })).param).toBe("input[0]");
  expect((await refused({ pairs: [pair] })).param).toBe("model");
});

test("an unknown model is 404 model not found", async () => {
  const e = await refused({ model: "nope", pairs: [pair] }, 404);
  expect(e.code).toBe("model_not_found");
});

test("a model of another kind is 400 naming model", async () => {
  for (const model of ["embed", "chat"]) {
    const e = await refused({ model, pairs: [pair] });
    expect(e.param).toBe("model");
    expect(e.message).toContain("cannot serve this endpoint");
  }
});
