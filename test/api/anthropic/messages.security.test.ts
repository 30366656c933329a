import { afterAll, beforeAll, expect, test } from "bun:test";
import { testApp, type TestApp } from "../../helpers/app";
import { authSuite, expectAuthError } from "../http/auth-suite";

const body = { model: "chat", max_tokens: 4, messages: [{ role: "user", content: "hi" }] };

authSuite({
  name: "messages",
  scope: "inference",
  format: "anthropic",
  routes: [
    { method: "POST", path: "/v1/messages", body },
    { method: "POST", path: "/v1/messages", body: { ...body, stream: true } },
    { method: "POST", path: "/v1/messages/count_tokens", body: { model: "chat", messages: body.messages } },
  ],
});

// Spec §5.2: the messages endpoints also take the key in x-api-key. No model is configured here:
// a key that passes auth reaches the route and gets the model's 404.
let t: TestApp;
beforeAll(() => {
  t = testApp();
});
afterAll(() => t.close());

for (const path of ["/v1/messages", "/v1/messages/count_tokens"]) {
  test(`${path} accepts the key in x-api-key`, async () => {
    const key = await t.key({ creditUsd: 1 });
    const res = await t.request("POST", path, { body, headers: { "x-api-key": key } });
    expect(res.status).toBe(404);
    expect((await res.json()).error.type).toBe("not_found_error");
  });

  test(`${path} with a wrong, revoked or empty x-api-key is 401 authentication_error`, async () => {
    const revoked = await t.key();
    await t.deps.accounts.revokeKey(revoked);
    for (const k of ["sk-apl-" + "A".repeat(44), revoked, ""]) {
      const res = await t.request("POST", path, { body, headers: { "x-api-key": k } });
      const b = await res.json();
      expect(expectAuthError(res, b, "anthropic", 401, "invalid_api_key")).toBe("Invalid API key");
      expect(b.error.type).toBe("authentication_error");
      expect(res.headers.get("request-id")).toBe(res.headers.get("x-request-id"));
    }
  });
}

test("an x-api-key on another route is not a key there", async () => {
  const key = await t.key({ creditUsd: 1 });
  const res = await t.request("POST", "/v1/chat/completions", { body: { model: "chat", messages: body.messages }, headers: { "x-api-key": key } });
  expect(res.status).toBe(401);
});
