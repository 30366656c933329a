import { afterAll, describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import { Type as T } from "@sinclair/typebox";
import { Elysia } from "elysia";
import { ApiError, ERROR_TABLE, renderError, toAnthropicErrorBody, toOpenAIErrorBody, type ErrorCode } from "../../../src/1-api/http/errors";
import { validationToApiError } from "../../../src/1-api/http/validation";
import { testApp } from "../../helpers/app";

describe("the error table", () => {
  const codes = Object.keys(ERROR_TABLE) as ErrorCode[];

  test.each(codes)("%s renders both envelopes with a string-or-null code and its status", async (code) => {
    const err = new ApiError(code, `message for ${code}`, { param: "field" });
    const oa = toOpenAIErrorBody(err);
    expect(oa).toEqual({ error: { message: `message for ${code}`, type: ERROR_TABLE[code].openaiType, param: "field", code: ERROR_TABLE[code].openaiCode } });
    expect(oa.error.code === null || typeof oa.error.code === "string").toBe(true);
    expect(toAnthropicErrorBody(err)).toEqual({ type: "error", error: { type: ERROR_TABLE[code].anthropicType, message: `message for ${code}` } });
    const res = renderError(err, "openai");
    expect(res.status).toBe(ERROR_TABLE[code].status);
    expect(res.headers.get("content-type")).toBe("application/json");
  });

  test("statuses follow the spec: 401 key, 402 trial, 404 model, 429 limits", () => {
    expect(ERROR_TABLE.invalid_api_key.status).toBe(401);
    expect(ERROR_TABLE.free_quota_exhausted).toMatchObject({ status: 402, openaiCode: "free_quota_exhausted" });
    expect(ERROR_TABLE.model_not_found.status).toBe(404);
    expect(ERROR_TABLE.rate_limit_exceeded.status).toBe(429);
  });

  test("headers given to an ApiError reach the response", () => {
    const res = renderError(new ApiError("rate_limit_exceeded", "slow down", { headers: { "retry-after": "7" } }), "anthropic");
    expect(res.headers.get("retry-after")).toBe("7");
  });
});

describe("validation failures name the field", () => {
  const app = new Elysia()
    .onError(({ code, error }) => (code === "VALIDATION" ? Response.json(toOpenAIErrorBody(validationToApiError(error)), { status: 400 }) : undefined))
    .post("/x", ({ body }) => body, {
      body: T.Object({
        model: T.String(),
        messages: T.Array(T.Object({ role: T.Union([T.Literal("user"), T.Literal("system")]), content: T.String() })),
        n: T.Optional(T.Integer({ minimum: 1 })),
      }),
    });
  const post = async (body: unknown) => {
    const res = await app.handle(new Request("http://localhost/x", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) }));
    expect(res.status).toBe(400);
    return (await res.json()).error;
  };

  test.each([
    { name: "a wrong literal lists the allowed values", body: { model: "m", messages: [{ role: "bot", content: "x" }] }, param: "messages[0].role", message: 'messages[0].role: must be one of "user", "system"' },
    { name: "a missing field is required", body: { model: "m" }, param: "messages", message: "messages: is required" },
    { name: "a wrong type says what was expected", body: { model: 5, messages: [] }, param: "model", message: "model: expected string" },
    { name: "a bound is named", body: { model: "m", messages: [], n: 0 }, param: "n", message: "n: expected integer to be greater or equal to 1" },
    { name: "a non-object body", body: [1], param: null, message: "request body must be a JSON object" },
  ])("$name", async ({ body, param, message }) => {
    const err = await post(body);
    expect(err).toMatchObject({ type: "invalid_request_error", param, message });
  });
});

describe("failures inside the app", () => {
  const t = testApp({
    override: (deps) => ({
      registry: { ...deps.registry, entry: () => { throw new Error("disk on fire at /secret/path"); } },
    }),
  });
  afterAll(() => t.close());

  test("an unexpected failure is a 500 naming the request id, logged, with no internals leaked", async () => {
    const res = await t.request("GET", "/v1/models/any", { key: await t.key() });
    expect(res.status).toBe(500);
    const id = res.headers.get("x-request-id")!;
    const body = await res.json();
    expect(body.error).toEqual({ message: `internal server error (request id ${id})`, type: "server_error", param: null, code: "internal_error" });
    expect(JSON.stringify(body)).not.toContain("secret");
    const logged = t.logs.find((l) => l.msg === "unhandled error" && l.request_id === id);
    expect(logged?.error).toContain("disk on fire");
  });

  test("the Anthropic client sees an authentication_error in its own envelope", async () => {
    const client = new Anthropic({ apiKey: "sk-apl-wrong", baseURL: "http://localhost", fetch: (u, i) => t.app.handle(new Request(u as string, i)) });
    const err = await client.messages.create({ model: "m", max_tokens: 5, messages: [{ role: "user", content: "hi" }] }).catch((e) => e);
    expect(err).toBeInstanceOf(Anthropic.AuthenticationError);
    expect(err.status).toBe(401);
    expect(err.error).toEqual({ type: "error", error: { type: "authentication_error", message: "Invalid API key" } });
  });
});
