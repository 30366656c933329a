import { afterAll, beforeAll, expect, setDefaultTimeout, test } from "bun:test";
import type { TestApp } from "../../helpers/app";
import { chatTestApp } from "../../helpers/chat";
import { authSuite } from "../http/auth-suite";

setDefaultTimeout(30_000); // model calls share two cores with whatever else runs

authSuite({
  name: "responses",
  scope: "inference",
  format: "openai",
  routes: [
    { method: "POST", path: "/v1/responses", body: { model: "chat", input: "hi" } },
    { method: "GET", path: "/v1/responses/resp_abc" },
  ],
});

let t: TestApp;
beforeAll(async () => {
  t = await chatTestApp();
});
afterAll(() => t.close());

test("a free key past its trial gets 402 free_quota_exhausted before any generation", async () => {
  const key = await t.key({ kind: "free", account: "trial-spent" });
  t.deps.db!.run("UPDATE accounts SET trial_tokens_used = 250000 WHERE name = 'trial-spent'");
  const res = await t.request("POST", "/v1/responses", { key, body: { model: "chat", input: "hi", max_output_tokens: 3 } });
  expect(res.status).toBe(402);
  expect((await res.json()).error.code).toBe("free_quota_exhausted");
  expect(t.deps.registry.chatEngine("chat").stats().busy).toBe(0);
});

test("a premium key with no balance gets 402 insufficient_balance, streamed or not", async () => {
  const key = await t.key({ kind: "premium" });
  for (const stream of [false, true]) {
    const res = await t.request("POST", "/v1/responses", { key, body: { model: "chat", input: "hi", max_output_tokens: 3, stream } });
    expect(res.status).toBe(402);
    expect((await res.json()).error.code).toBe("insufficient_balance");
  }
});
