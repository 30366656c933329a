import { afterAll, beforeAll, expect, test } from "bun:test";
import type OpenAI from "openai";
import type { TestApp } from "../helpers/app";
import { chatTestApp, forced } from "../helpers/chat";

let t: TestApp & { openai: (key: string) => OpenAI };
beforeAll(async () => {
  t = await chatTestApp();
});
afterAll(() => t.close());

const row = (requestId: string) =>
  t.deps.db!.query<Record<string, number | string>, [string]>("SELECT * FROM usage WHERE request_id = ?").get(requestId)!;

test("the usage row matches the usage returned, and reasoning is billed as output", async () => {
  const key = await t.key({ account: "payer", creditUsd: 1 });
  const client = t.openai(key);
  const before = (await t.deps.accounts.getAccount("payer")).balance_micros;
  const { data, response } = await client.chat.completions
    .create({ model: "chat", max_tokens: 40, temperature: 0, messages: [{ role: "user", content: `Think. ${forced("<think>\nSome careful reasoning here.\n</think>\n\nok")}` }] })
    .withResponse();
  const u = data.usage!;
  expect(u.completion_tokens_details!.reasoning_tokens).toBeGreaterThan(0);
  const r = row(response.headers.get("x-request-id")!);
  expect(r).toMatchObject({ model: "chat", endpoint: "/v1/chat/completions", input_tokens: u.prompt_tokens, output_tokens: u.completion_tokens, cached_tokens: u.prompt_tokens_details!.cached_tokens, batch: 0 });
  // $0.12/M in, $1.70/M out, rounded up once; the reasoning tokens are inside completion_tokens.
  const cost = Math.ceil((u.prompt_tokens * 120_000 + u.completion_tokens * 1_700_000) / 1_000_000);
  expect(r.cost_micros).toBe(cost);
  expect((await t.deps.accounts.getAccount("payer")).balance_micros).toBe(before - cost);
});

test("a streamed request is billed once, with the usage its last chunk reported", async () => {
  const key = await t.key({ account: "streamer", creditUsd: 1 });
  const res = await t.request("POST", "/v1/chat/completions", { key, body: { model: "chat", max_tokens: 9, stream: true, messages: [{ role: "user", content: "hi" }] } });
  const chunks = (await res.text()).trim().split("\n\n").slice(0, -1).map((e) => JSON.parse(e.slice(6)));
  const usage = chunks.at(-1).usage;
  const r = row(res.headers.get("x-request-id")!);
  expect(r.input_tokens).toBe(usage.prompt_tokens);
  expect(r.output_tokens).toBe(usage.completion_tokens);
  expect(t.deps.db!.query("SELECT COUNT(*) AS n FROM usage WHERE account_id = (SELECT id FROM accounts WHERE name = 'streamer')").get()).toEqual({ n: 1 });
});

test("a free key spends its trial by prompt plus completion tokens", async () => {
  const key = await t.key({ account: "freebie", kind: "free" });
  const r = await t.openai(key).chat.completions.create({ model: "chat", max_tokens: 5, messages: [{ role: "user", content: "hi" }] });
  expect((await t.deps.accounts.getAccount("freebie")).trial_tokens_used).toBe(r.usage!.total_tokens);
});

test("a refused request (bad schema) charges nothing", async () => {
  const key = await t.key({ account: "refused", creditUsd: 1 });
  const res = await t.request("POST", "/v1/chat/completions", {
    key,
    body: { model: "chat", messages: [{ role: "user", content: "x" }], response_format: { type: "json_schema", json_schema: { name: "a", schema: { type: "array", uniqueItems: true } } } },
  });
  expect(res.status).toBe(400);
  expect((await t.deps.accounts.getAccount("refused")).balance_micros).toBe(1_000_000);
  expect(await t.deps.meter.held((await t.deps.accounts.getAccount("refused")).id)).toEqual({ micros: 0, tokens: 0 });
});
