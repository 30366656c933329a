import { afterAll, beforeAll, expect, test } from "bun:test";
import { ensureChatModel } from "../../models/cache";
import type { DecodeLoop } from "../../src/3-engines/llama/decode-loop";
import type { TestApp } from "../helpers/app";
import { BASE } from "../helpers/app";
import { chatTestApp } from "../helpers/chat";

// A client that leaves during its prompt's decoding stops its work there (issue 41, M3: a 47k-token
// prompt abandoned after 2 s ran on for 30 s, was logged 200 and billed whole). A model with
// 16-token steps makes the prompt's decoding take many steps, so the cancel lands in its middle.

let t: TestApp;
beforeAll(async () => {
  t = await chatTestApp({ builtIn: false, extraModels: [{ id: "steps", name: "Small steps", kind: "chat", files: { model: await ensureChatModel("chat") }, max_context: 4096, slots: 1, batch_size: 16, load: "first_use" }] });
});
afterAll(() => t.close());

const loopOf = () => ((t.deps.registry.engines().find((e) => e.modelId === "steps") as unknown as { state: { loop: DecodeLoop } }).state.loop);

test("a request cancelled in its prompt's decoding stops there, frees its slot and is billed only the prompt tokens decoded", async () => {
  const key = await t.key({ account: "leaver", creditUsd: 1 });
  const body = (content: string) => JSON.stringify({ model: "steps", max_tokens: 5, temperature: 0, messages: [{ role: "user", content }] });
  // load the model first, and learn how long the prompt is
  const warm = await t.app.handle(new Request(`${BASE}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: body("hi") }));
  expect(warm.status).toBe(200);
  const long = Array.from({ length: 300 }, (_, i) => `word${i % 97} number ${i}.`).join(" ");
  const promptTokens = await t.deps.chat.countTokens((await t.deps.accounts.authenticate(key))!, { model: "steps", messages: [{ role: "user", content: long }] } as never);
  expect(promptTokens).toBeGreaterThan(2000); // > 125 steps of 16 tokens

  const loop = loopOf();
  const before = loop.stats().steps;
  const controller = new AbortController();
  const answer = t.app.handle(new Request(`${BASE}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: body(long), signal: controller.signal })).then(
    (r) => r.status,
    () => "aborted",
  );
  for (let i = 0; i < 20_000 && loop.stats().steps - before < 5; i++) await Bun.sleep(1);
  controller.abort();
  expect(await answer).toBe(499);
  // the generation's end is recorded once the loop let go of the slot
  for (let i = 0; i < 500 && t.deps.db!.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM usage WHERE account_id = (SELECT id FROM accounts WHERE name = 'leaver')").get()!.n < 2; i++) await Bun.sleep(10);
  const steps = loop.stats().steps - before;
  expect(steps).toBeLessThan(promptTokens / 16 / 2);

  const rows = t.deps.db!.query<{ input_tokens: number; output_tokens: number; cost_micros: number }, []>("SELECT input_tokens, output_tokens, cost_micros FROM usage WHERE account_id = (SELECT id FROM accounts WHERE name = 'leaver') ORDER BY rowid").all();
  expect(rows).toHaveLength(2);
  const cancelled = rows[1]!;
  expect(cancelled.output_tokens).toBe(0);
  expect(cancelled.input_tokens).toBeGreaterThan(0);
  expect(cancelled.input_tokens).toBeLessThan(promptTokens / 2);
  expect(cancelled.input_tokens).toBeLessThanOrEqual(steps * 16 + 16);

  // the one slot is free: the next request is answered
  const next = await t.app.handle(new Request(`${BASE}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: body("hello") }));
  expect(next.status).toBe(200);
});

test("the cancelled request is logged as cancelled (499), not as an answer", async () => {
  const log = t.logs.filter((l) => l.msg === "request" && l.route === "/v1/chat/completions").map((l) => l.status);
  expect(log).toContain(499);
});
