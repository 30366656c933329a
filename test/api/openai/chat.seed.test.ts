import { afterAll, beforeAll, expect, test } from "bun:test";
import type OpenAI from "openai";
import type { TestApp } from "../../helpers/app";
import { chatTestApp } from "../../helpers/chat";

// Sampling without a seed draws a fresh one per request (a client's retry must not repeat the same
// answer); with a seed, the answer is reproducible. Both decode paths: plain requests (plain.ts)
// and requests through LlamaChat (tools offered).

let t: TestApp & { openai: (key: string) => OpenAI };
let client: OpenAI;
beforeAll(async () => {
  t = await chatTestApp();
  client = t.openai(await t.key({ creditUsd: 5 }));
});
afterAll(() => t.close());

const noThink = { chat_template_kwargs: { enable_thinking: false } } as Record<string, unknown>;
const tools = [{ type: "function", function: { name: "lookup", parameters: { type: "object", properties: { q: { type: "string" } } } } }];

const paths = [
  { name: "plain requests", extra: {} },
  { name: "requests through LlamaChat (tools offered)", extra: { tools, tool_choice: "auto" } },
];

async function answers(extra: Record<string, unknown>, n: number, seed?: number): Promise<string[]> {
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    const r = await client.chat.completions.create({
      model: "chat",
      max_tokens: 32,
      temperature: 1,
      messages: [{ role: "user", content: "Surprise me." }],
      ...(seed === undefined ? {} : { seed }),
      ...noThink,
      ...extra,
    } as any);
    const m = r.choices[0]!.message;
    out.push(JSON.stringify([m.content, m.tool_calls ?? null]));
  }
  return out;
}

for (const p of paths) {
  test(`${p.name}: identical requests without a seed at temperature 1 give different answers`, async () => {
    const a = await answers(p.extra, 3);
    // 3 × 32 tokens at temperature 1 on random weights: equal twice only by a fixed seed
    expect(new Set(a).size).toBeGreaterThanOrEqual(2);
  });

  test(`${p.name}: identical requests with the same seed give the same answer`, async () => {
    const a = await answers(p.extra, 2, 4242);
    expect(a[1]).toBe(a[0]!);
  });
}

test("Messages, which has no seed, draws a fresh one per request too", async () => {
  const key = await t.key({ creditUsd: 5 });
  const body = { model: "chat", max_tokens: 32, temperature: 1, messages: [{ role: "user", content: "Surprise me." }] };
  const texts: string[] = [];
  for (let i = 0; i < 3; i++) {
    const res = await t.request("POST", "/v1/messages", { key, body });
    expect(res.status).toBe(200);
    texts.push(JSON.stringify(((await res.json()) as { content: unknown }).content));
  }
  expect(new Set(texts).size).toBeGreaterThanOrEqual(2);
});
