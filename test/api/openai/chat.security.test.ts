import { afterAll, beforeAll, expect, test } from "bun:test";
import { authSuite } from "../http/auth-suite";
import { chatTestApp } from "../../helpers/chat";
import type { TestApp } from "../../helpers/app";

authSuite({
  name: "chat completions",
  scope: "inference",
  format: "openai",
  routes: [{ method: "POST", path: "/v1/chat/completions", body: { model: "chat", messages: [{ role: "user", content: "hi" }] } }],
});

let t: TestApp;
beforeAll(async () => {
  t = await chatTestApp();
});
afterAll(() => t.close());

test("a free key past its trial gets 402 free_quota_exhausted before any generation", async () => {
  const key = await t.key({ kind: "free", account: "trial-spent" });
  t.deps.db!.run("UPDATE accounts SET trial_tokens_used = 250000 WHERE name = 'trial-spent'");
  const res = await t.request("POST", "/v1/chat/completions", { key, body: { model: "chat", messages: [{ role: "user", content: "hi" }], max_tokens: 3 } });
  expect(res.status).toBe(402);
  expect((await res.json()).error.code).toBe("free_quota_exhausted");
  expect(t.deps.registry.chatEngine("chat").stats().busy).toBe(0);
});

test("a premium key with no balance gets 402 insufficient_balance", async () => {
  const key = await t.key({ kind: "premium" });
  const res = await t.request("POST", "/v1/chat/completions", { key, body: { model: "chat", messages: [{ role: "user", content: "hi" }], max_tokens: 3 } });
  expect(res.status).toBe(402);
  expect((await res.json()).error.code).toBe("insufficient_balance");
});
