import { afterAll, beforeAll, expect, test } from "bun:test";
import type { TestApp } from "../../helpers/app";
import { chatTestApp, forced } from "../../helpers/chat";

// A request whose grammar costs the decode loop more than its budget is ended with a named 400 and
// its slot freed (issue 41: `^(a{0,2000}){0,2000}$` multiplied its parse states at every token and
// held a model's loop for 14 minutes). The tiny model's vocabulary makes every grammar cheap, so the
// budget is lowered here to reach it; the mechanism is the one the server runs.

let t: TestApp;
beforeAll(async () => {
  t = await chatTestApp({ slots: 2, grammarBudget: { statesMax: 64 } });
});
afterAll(() => t.close());

const many = "a".repeat(400);
const request = (pattern: string) => ({
  model: "chat",
  max_tokens: 300,
  temperature: 0,
  chat_template_kwargs: { enable_thinking: false },
  messages: [{ role: "user", content: `say a's ${forced(`"${many}`)}` }],
  response_format: { type: "json_schema", json_schema: { name: "a", schema: { type: "string", pattern } } },
});

test("a grammar whose parse states grow past the bound ends its request with schema_too_complex, and the slot serves the next one", async () => {
  const key = await t.key({ creditUsd: 1 });
  // two bounded repetitions, one inside the other: every "a" may end an inner round or not
  const res = await t.request("POST", "/v1/chat/completions", { key, body: request("^(a{0,10}){0,60}$") });
  expect(res.status).toBe(400);
  const body = (await res.json()) as { error: { code: string; message: string } };
  expect(body.error.code).toBe("schema_too_complex");
  expect(body.error.message).toMatch(/grew past 64 parse states while generating/);
  // the same text without the nesting stays within it
  const fine = await t.request("POST", "/v1/chat/completions", { key, body: request("^a{0,600}$") });
  expect(fine.status).toBe(200);
  expect(((await fine.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content).toMatch(/^"a{50,}/);
});

test("a streamed request over the budget ends with an error event, and nothing is charged", async () => {
  const key = await t.key({ account: "streamer", creditUsd: 1 });
  const res = await t.request("POST", "/v1/chat/completions", { key, body: { ...request("^(a{0,10}){0,60}$"), stream: true } });
  const text = await res.text();
  expect(text).toContain("schema_too_complex");
  expect(t.deps.db!.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM usage WHERE account_id = (SELECT id FROM accounts WHERE name = 'streamer')").get()!.n).toBe(0);
});

test("a grammar slower a token than the budget ends its request with schema_too_complex; requests without a grammar are not held to it", async () => {
  const slow = await chatTestApp({ builtIn: true, grammarBudget: { msPerToken: 0, msAllowance: 0 } });
  try {
    const key = await slow.key({ creditUsd: 1 });
    const res = await slow.request("POST", "/v1/chat/completions", { key, body: request("^a{0,600}$") });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(/took more than 0 ms a token to follow/);
    const plain = await slow.request("POST", "/v1/chat/completions", { key, body: { model: "chat", max_tokens: 5, messages: [{ role: "user", content: "hi" }] } });
    expect(plain.status).toBe(200);
  } finally {
    await slow.close();
  }
});
