import { afterAll, beforeAll, expect, test } from "bun:test";
import { authSuite } from "../http/auth-suite";
import { onnxTestApp, type OnnxTestApp } from "../../helpers/onnx";

authSuite({
  name: "classify",
  scope: "inference",
  format: "openai",
  routes: [{ method: "POST", path: "/v1/classify", body: { model: "nli", pairs: [{ premise: "a", hypothesis: "b" }] } }],
});

let t: OnnxTestApp;
beforeAll(async () => {
  t = await onnxTestApp();
});
afterAll(() => t.close());

const body = { model: "nli", pairs: [{ premise: "A man plays.", hypothesis: "Nobody plays." }] };

test("a free key past its trial gets 402 free_quota_exhausted and the model never runs", async () => {
  const key = await t.key({ kind: "free", account: "nli-spent" });
  t.deps.db!.run("UPDATE accounts SET trial_tokens_used = 250000 WHERE name = 'nli-spent'");
  const runs = t.classifier().runs;
  const res = await t.request("POST", "/v1/classify", { key, body });
  expect(res.status).toBe(402);
  expect((await res.json()).error.code).toBe("free_quota_exhausted");
  expect(t.classifier().runs).toBe(runs);
});

test("a premium key with no balance gets 402 insufficient_balance", async () => {
  const key = await t.key({ kind: "premium" });
  const res = await t.request("POST", "/v1/classify", { key, body });
  expect(res.status).toBe(402);
  expect((await res.json()).error.code).toBe("insufficient_balance");
});

test("error messages do not echo the input text", async () => {
  const key = await t.key({ creditUsd: 1 });
  const secret = "my-secret-password-1234 ".repeat(200);
  const res = await t.request("POST", "/v1/classify", { key, body: { model: "nli", input: ["ok", secret.repeat(3)] } });
  expect(res.status).toBe(400);
  expect(await res.text()).not.toContain("my-secret-password");
});
