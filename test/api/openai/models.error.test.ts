import { afterAll, expect, test } from "bun:test";
import OpenAI from "openai";
import { testApp } from "../../helpers/app";
import { manifestConfig } from "../../helpers/models";

const t = testApp({ config: manifestConfig() });
afterAll(() => t.close());
const key = await t.key({ creditUsd: 1 });

test("an unknown model id is 404 model not found, naming the id", async () => {
  const res = await t.request("GET", "/v1/models/gpt-9", { key });
  expect(res.status).toBe(404);
  expect(await res.json()).toEqual({
    error: { message: 'model not found: "gpt-9"', type: "invalid_request_error", param: "model", code: "model_not_found" },
  });
});

test("a retired model id is 404 model not found and names its replacement", async () => {
  const res = await t.request("GET", "/v1/models/old-chat", { key });
  expect(res.status).toBe(404);
  const body = await res.json();
  expect(body.error.code).toBe("model_not_found");
  expect(body.error.message).toContain("model not found");
  expect(body.error.message).toContain("big-chat");
});

test("the openai client raises NotFoundError for an unknown model", async () => {
  const client = new OpenAI({ apiKey: key, baseURL: "http://localhost/v1", fetch: (u, i) => t.app.handle(new Request(u, i)) });
  const err = await client.models.retrieve("nope").catch((e) => e);
  expect(err).toBeInstanceOf(OpenAI.NotFoundError);
  expect(err.code).toBe("model_not_found");
});

test("an unknown route under /v1 is 404 in the OpenAI envelope", async () => {
  const res = await t.request("POST", "/v1/nothing-here", { key, body: {} });
  expect(res.status).toBe(404);
  const body = await res.json();
  expect(body.error).toMatchObject({ type: "invalid_request_error", code: "not_found", message: "Invalid URL (POST /v1/nothing-here)" });
});

test("an unknown route under /v1/messages answers in the Anthropic envelope", async () => {
  const res = await t.request("POST", "/v1/messages/unknown", { key, body: {} });
  expect(res.status).toBe(404);
  expect(await res.json()).toEqual({ type: "error", error: { type: "not_found_error", message: "Invalid URL (POST /v1/messages/unknown)" } });
  expect(res.headers.get("request-id")).toMatch(/^req_/);
});

test("an unknown path outside /v1 is 404 without needing a key", async () => {
  const res = await t.request("GET", "/nowhere");
  expect(res.status).toBe(404);
  expect((await res.json()).error.code).toBe("not_found");
});

test("a body larger than server.max_body_mb is 413 in the wire format's envelope", async () => {
  const small = testApp({ config: { server: { max_body_mb: 0.001 } } });
  try {
    const k = await small.key();
    const big = { key: k, body: "x".repeat(2000), headers: { "content-length": "2000" } };
    const res = await small.request("POST", "/v1/chat/completions", big);
    expect(res.status).toBe(413);
    expect((await res.json()).error).toMatchObject({ code: "payload_too_large", message: expect.stringContaining("1048 bytes") });
    const msg = await small.request("POST", "/v1/messages", big);
    expect(msg.status).toBe(413);
    expect((await msg.json()).error.type).toBe("request_too_large");
  } finally {
    await small.close();
  }
});
