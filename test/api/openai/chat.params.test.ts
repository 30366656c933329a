import { afterAll, beforeAll, expect, test } from "bun:test";
import type OpenAI from "openai";
import type { TestApp } from "../../helpers/app";
import { chatTestApp, forced } from "../../helpers/chat";
import { ensureChatModel } from "../../../models/cache";
import { testLlama } from "../../models/llama";

let t: TestApp & { openai: (key: string) => OpenAI };
let client: OpenAI;
beforeAll(async () => {
  t = await chatTestApp();
  client = t.openai(await t.key({ creditUsd: 5 }));
});
afterAll(() => t.close());

const noThink = { chat_template_kwargs: { enable_thinking: false } } as Record<string, unknown>;

test("a stop sequence ends the answer before it, with finish_reason stop", async () => {
  const r = await client.chat.completions.create({ model: "chat", max_tokens: 30, temperature: 0, stop: ["STOP"], messages: [{ role: "user", content: `Go. ${forced("one two STOP three")}` }], ...noThink } as any);
  expect(r.choices[0]!.finish_reason).toBe("stop");
  expect(r.choices[0]!.message.content).toBe("one two ");
});

test("the same seed at a non-zero temperature gives the same answer; top_p is accepted", async () => {
  const params = { model: "chat", max_tokens: 12, temperature: 1.3, top_p: 0.95, seed: 1234, messages: [{ role: "user" as const, content: "Surprise me." }], ...noThink };
  const a = await client.chat.completions.create(params as any);
  const b = await client.chat.completions.create(params as any);
  expect(a.choices[0]!.message.content).toBe(b.choices[0]!.message.content);
});

test("logit_bias reaches the end-of-turn tokens: -100 lets the answer run on to max_tokens, +100 ends it at once", async () => {
  const llama = await testLlama();
  const vocab = await llama.loadModel({ modelPath: await ensureChatModel("chat"), vocabOnly: true });
  const ends = ["<|im_end|>", "<|endoftext|>"].map((t) => vocab.tokenize(t, true)[0]!);
  expect(ends.every((id) => vocab.isEogToken(id))).toBe(true);
  await vocab.dispose();
  const ask = (bias?: Record<string, number>) =>
    client.chat.completions.create({ model: "chat", max_tokens: 160, temperature: 0, messages: [{ role: "user", content: "hi" }], ...(bias ? { logit_bias: bias } : {}), ...noThink } as any);
  // this tiny model ends its answer to "hi" by itself after ~110 tokens
  const free = await ask();
  expect(free.choices[0]!.finish_reason).toBe("stop");
  expect(free.usage!.completion_tokens).toBeLessThan(160);
  const banned = await ask(Object.fromEntries(ends.map((id) => [String(id), -100])));
  expect(banned.choices[0]!.finish_reason).toBe("length");
  expect(banned.usage!.completion_tokens).toBe(160);
  expect(banned.choices[0]!.message.content!.startsWith(free.choices[0]!.message.content!)).toBe(true);
  const forcedEnd = await ask({ [String(ends[0])]: 100 });
  expect(forcedEnd.choices[0]!.finish_reason).toBe("stop");
  expect(forcedEnd.choices[0]!.message.content).toBe("");
});

test("the small chat model takes a prompt larger than the chat model's window", async () => {
  const long = "The quick brown fox jumps over the lazy dog. ".repeat(450); // ≈ 6,000 tokens
  const small = await client.chat.completions.create({ model: "small-chat", max_tokens: 2, messages: [{ role: "user", content: long }], ...noThink } as any);
  expect(small.usage!.prompt_tokens).toBeGreaterThan(4096);
  const err = await client.chat.completions.create({ model: "chat", max_tokens: 2, messages: [{ role: "user", content: long }], ...noThink } as any).catch((e) => e);
  expect(err.code).toBe("context_length_exceeded");
}, 60_000);

test("a model can be unloaded and is loaded again on the next request", async () => {
  await client.chat.completions.create({ model: "chat", max_tokens: 1, messages: [{ role: "user", content: "hi" }] });
  const engine = t.deps.registry.chatEngine("chat");
  expect(engine.loaded).toBe(true);
  expect(await t.deps.registry.adminUnload("chat")).toBe("unloaded");
  expect(engine.loaded).toBe(false);
  const r = await client.chat.completions.create({ model: "chat", max_tokens: 1, messages: [{ role: "user", content: "hi" }] });
  expect(r.choices).toHaveLength(1);
  expect(engine.loaded).toBe(true);
});

test("/v1/models lists the chat models with their context windows", async () => {
  const list = await client.models.list();
  expect(list.data.map((m: any) => [m.id, m.kind, m.max_context])).toEqual([
    ["chat", "chat", 4096],
    ["small-chat", "chat", 16384],
    ["tight", "chat", 256],
  ]);
});
