import { afterAll, expect, test } from "bun:test";
import { authSuite } from "../http/auth-suite";
import { testApp } from "../../helpers/app";
import { manifestConfig } from "../../helpers/models";

authSuite({
  name: "models",
  scope: "inference",
  format: "openai",
  routes: [
    { method: "GET", path: "/v1/models" },
    { method: "GET", path: "/v1/models/some-id" },
  ],
});

const t = testApp({ config: manifestConfig() });
afterAll(() => t.close());

test("x-api-key is not accepted outside /v1/messages, except on the model list for Anthropic clients", async () => {
  const key = await t.key();
  const res = await t.request("GET", "/v1/models", { headers: { "x-api-key": key } });
  expect(res.status).toBe(401);
  const anthropic = await t.request("GET", "/v1/models", { headers: { "x-api-key": key, "anthropic-version": "2023-06-01" } });
  expect(anthropic.status).toBe(200);
  const wrong = await t.request("GET", "/v1/models", { headers: { "x-api-key": "nope", "anthropic-version": "2023-06-01" } });
  expect(await wrong.json()).toEqual({ type: "error", error: { type: "authentication_error", message: "Invalid API key" } });
});

test("x-api-key is accepted on /v1/messages paths", async () => {
  const key = await t.key();
  const res = await t.request("POST", "/v1/messages/not-a-route", { headers: { "x-api-key": key }, body: {} });
  expect(res.status).toBe(404); // authenticated; the route does not exist
  expect((await res.json()).error.type).toBe("not_found_error");
});

test("an unknown /v1 path without a key is 401, not a route probe", async () => {
  const res = await t.request("GET", "/v1/secret-route");
  expect(res.status).toBe(401);
});

test("a bad key is refused before the body is read", async () => {
  const res = await t.request("POST", "/v1/models", { body: "{not json", headers: { authorization: "Bearer nope" } });
  expect(res.status).toBe(401);
});

test("the bearer scheme is case-insensitive and surrounding spaces are tolerated", async () => {
  const key = await t.key();
  for (const auth of [`bearer ${key}`, `BEARER  ${key} `]) {
    const res = await t.request("GET", "/v1/models", { headers: { authorization: auth } });
    expect(res.status).toBe(200);
  }
});
