import { afterAll, beforeAll, expect, test } from "bun:test";
import OpenAI from "openai";
import { chatTestApp } from "../../helpers/chat";
import { BASE, type TestApp } from "../../helpers/app";

let t: TestApp & { openai: (key: string) => OpenAI };
let client: OpenAI;
let key: string;
beforeAll(async () => {
  t = await chatTestApp();
  key = await t.key({ creditUsd: 5 });
  client = t.openai(key);
});
afterAll(() => t.close());

async function refusal(params: Record<string, unknown>) {
  const err = await client.chat.completions.create({ model: "chat", messages: [{ role: "user", content: "hi" }], ...params } as any).catch((e) => e);
  expect(err).toBeInstanceOf(OpenAI.APIError);
  return err as InstanceType<typeof OpenAI.APIError>;
}

test("a prompt longer than the context window is 400 context_length_exceeded, never truncated", async () => {
  const err = await refusal({ model: "tight", messages: [{ role: "user", content: "word ".repeat(400) }] });
  expect(err).toBeInstanceOf(OpenAI.BadRequestError);
  expect(err.code).toBe("context_length_exceeded");
  expect(err.message).toContain("context window is 256 tokens");
});

test("max_tokens beyond what the context leaves is 400 context_length_exceeded", async () => {
  const err = await refusal({ model: "tight", max_tokens: 250, messages: [{ role: "user", content: "a few words here" }] });
  expect(err.code).toBe("context_length_exceeded");
  expect(err.message).toContain("max_tokens asks for 250");
});

test("an unknown model is 404 model not found", async () => {
  const err = await refusal({ model: "gpt-nope" });
  expect(err).toBeInstanceOf(OpenAI.NotFoundError);
  expect(err.code).toBe("model_not_found");
});

test("bad bodies are 400 naming the field", async () => {
  for (const [body, param] of [
    [{ model: "chat" }, "messages"],
    [{ model: "chat", messages: [] }, "messages"],
    [{ model: "chat", messages: [{ role: "robot", content: "x" }] }, "messages[0].role"],
    [{ model: "chat", messages: [{ role: "user", content: 5 }] }, "messages[0].content"],
    [{ model: "chat", messages: [{ role: "user", content: "x" }], temperature: 9 }, "temperature"],
    [{ model: "chat", messages: [{ role: "user", content: "x" }], n: 3 }, "n"],
    [{ model: "chat", messages: [{ role: "user", content: "x" }], max_tokens: 0 }, "max_tokens"],
    [{ model: "chat", messages: [{ role: "user", content: "x" }], tool_choice: "required" }, "tool_choice"],
  ] as const) {
    const res = await t.request("POST", "/v1/chat/completions", { key, body });
    expect(res.status).toBe(400);
    const e = (await res.json()).error;
    expect(e.type).toBe("invalid_request_error");
    expect(e.param).toBe(param);
  }
});

test("a body that is not JSON is 400 invalid_json", async () => {
  const res = await t.request("POST", "/v1/chat/completions", { key, body: "{not json" });
  expect(res.status).toBe(400);
  expect((await res.json()).error.code).toBe("invalid_json");
});

test("a schema keyword no grammar can express is refused in structured output, naming it", async () => {
  const err = await refusal({
    response_format: { type: "json_schema", json_schema: { name: "n", schema: { type: "object", properties: { n: { type: "array", uniqueItems: true } } } } },
  });
  expect(err.status).toBe(400);
  expect(err.code).toBe("unsupported_schema");
  expect(err.param).toBe("response_format.json_schema.schema.properties.n.uniqueItems");
});

test("a strict tool parameter schema with a keyword it cannot enforce is refused, naming it", async () => {
  const err = await refusal({ tools: [{ type: "function", function: { name: "f", strict: true, parameters: { type: "object", properties: { s: { type: "array", uniqueItems: true } } } } }] });
  expect(err.param).toBe("tools[0].function.parameters.properties.s.uniqueItems");
});

test("beside tools, a response_format schema no grammar can express is still a named 400", async () => {
  const err = await refusal({
    tools: [{ type: "function", function: { name: "f" } }],
    response_format: { type: "json_schema", json_schema: { name: "n", schema: { type: "array", uniqueItems: true } } },
  });
  expect(err.status).toBe(400);
  expect(err.param).toBe("response_format.json_schema.schema.uniqueItems");
});

test("an image part sent to a model without vision is 400 naming the model", async () => {
  const err = await refusal({ messages: [{ role: "user", content: [{ type: "text", text: "what is it" }, { type: "image_url", image_url: { url: "data:image/png;base64,iVBORw0KGgo=" } }] }] });
  expect(err.status).toBe(400);
  expect(err.param).toBe("messages[0].content[1]");
  expect(err.message).toContain('model "chat" does not accept images');
});

test("a logit_bias token id outside the vocabulary is refused", async () => {
  const err = await refusal({ logit_bias: { "999999": 5 } });
  expect(err.param).toBe("logit_bias.999999");
});

test("a wrongly typed stream flag is a 400, not a silent JSON answer", async () => {
  const res = await t.request("POST", "/v1/chat/completions", { key, body: { model: "chat", messages: [{ role: "user", content: "x" }], stream: "yes" } });
  expect(res.status).toBe(400);
  expect((await res.json()).error.param).toBe("stream");
});

test("a request whose client is gone before it gets a slot is logged as cancelled (499), never as an unhandled 500", async () => {
  const controller = new AbortController();
  controller.abort();
  const res = await t.app.handle(
    new Request(`${BASE}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "chat", max_tokens: 4, messages: [{ role: "user", content: "hi" }] }),
      signal: controller.signal,
    }),
  );
  expect(res.status).toBe(499);
  expect(t.logs.filter((l) => l.msg === "unhandled error")).toEqual([]);
  expect(t.logs.filter((l) => l.msg === "request" && l.status === 499).length).toBe(1);
});
