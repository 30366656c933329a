import { afterAll, beforeAll, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { readGgufFileInfo } from "node-llama-cpp";
import { catalogue } from "../models/catalogue";
import { DEMO_GENERATORS, ensureDemoModels } from "../src/ops/demo";
import type { ModelManifest } from "../src/lib/manifest";
import { llamaChatFactory } from "../src/3-engines/llama/factory";
import { BASE, tempDir, testApp, type TestApp } from "./helpers/app";

// `serve --demo` serves a chat model whose window holds a coding agent's prompt and its
// max_tokens (Claude Code's first request: ~23k tokens of prompt, max_tokens 32000; Codex ~13k),
// so Claude Code and Codex can be pointed at the demo as they are.

const dataDir = tempDir();
let demoChat: ModelManifest;
let t: TestApp;
let key: string;
beforeAll(async () => {
  const chats = await ensureDemoModels(
    dataDir,
    DEMO_GENERATORS.filter((g) => g.kind === "chat"),
  );
  demoChat = chats.find((m) => m.id === "demo-chat")!;
  t = testApp({
    config: { engines: { device: "cpu", threads: 2 }, models: [{ ...demoChat, load: "first_use" }] },
    engines: (config, logger) => ({ chat: llamaChatFactory(config, logger) }),
  });
  key = await t.key({ creditUsd: 5 });
});
afterAll(async () => {
  await t.close();
  rmSync(dataDir, { recursive: true, force: true });
});

/** A system prompt of `chars` characters of English words (~4.3 characters a token with this tokenizer). */
function longPrompt(chars: number): string {
  const words = "the quick brown fox jumps over the lazy dog while a customer asks about the weather in the capital and the library function returns answers to questions".split(" ");
  const out: string[] = [];
  for (let i = 0, n = 0; n < chars; i++) {
    const w = words[i % words.length]! + (i % 13 === 12 ? ".\n" : " ");
    out.push(w);
    n += w.length;
  }
  return out.join("");
}

test("the demo's chat model ends a sampled answer on its own, as a real one does: a client that sends no max_tokens (Codex) waits seconds, not minutes", async () => {
  // Without its end lean (models/presets.ts) a random model drew the end token about once in its
  // vocabulary's worth of tokens, with a long tail: a Codex turn streamed noise for minutes.
  const answers: { choices: { finish_reason: string }[]; usage: { completion_tokens: number } }[] = [];
  for (let i = 0; i < 10; i++) {
    const res = await t.request("POST", "/v1/chat/completions", {
      key,
      body: { model: "demo-chat", messages: [{ role: "user", content: `say hi ${i}` }], temperature: 1, seed: i + 1, max_tokens: 1000 },
    });
    expect(res.status).toBe(200);
    answers.push(await res.json());
  }
  expect(answers.map((a) => a.choices[0]!.finish_reason)).toEqual(Array(10).fill("stop"));
  expect(answers.reduce((n, a) => n + a.usage.completion_tokens, 0) / 10).toBeLessThan(300);
}, 60_000);

test("the demo's chat model has a 65,536-token window, and its GGUF was trained for it", async () => {
  expect(demoChat.max_context).toBeGreaterThanOrEqual(65_536);
  const info = await readGgufFileInfo(demoChat.files.model!, { logWarnings: false });
  expect(Number(info.architectureMetadata.context_length)).toBeGreaterThanOrEqual(demoChat.max_context);
  expect(demoChat.slots).toBeLessThanOrEqual(2); // KV: 256 bytes a token, 16 MiB a slot
  // `models list` shows the same window
  expect(catalogue().find((e) => e.id === "demo-chat")).toMatchObject({ name: demoChat.name, max_context: demoChat.max_context });
});

test("a ~30k-token prompt with Claude Code's max_tokens of 32000 is accepted on /v1/messages", async () => {
  const system = longPrompt(130_000);
  const body = { model: "demo-chat", system, messages: [{ role: "user", content: "say hi" }] };
  const counted = await t.request("POST", "/v1/messages/count_tokens", { key, body });
  const { input_tokens } = (await counted.json()) as { input_tokens: number };
  expect(input_tokens).toBeGreaterThan(28_000);
  expect(input_tokens + 32_000).toBeLessThanOrEqual(65_536);

  // One token answered: the prompt is evaluated in full (~12 s on one core of a 2-core box).
  const started = performance.now();
  const one = await t.request("POST", "/v1/messages", { key, body: { ...body, max_tokens: 1 } });
  expect(one.status).toBe(200);
  // (a slot's cache may hold the template's first token from an earlier request: Anthropic counts it apart)
  const { usage } = (await one.json()) as { usage: { input_tokens: number; cache_read_input_tokens?: number } };
  expect(usage.input_tokens + (usage.cache_read_input_tokens ?? 0)).toBe(input_tokens);
  console.log(`demo-chat: ${input_tokens} prompt tokens evaluated in ${Math.round(performance.now() - started)} ms`);

  // Claude Code asks for max_tokens 32000 with it: the stream starts (a refusal would be a 400 before
  // it); the prompt is cached from the request above. The client then leaves.
  const leave = new AbortController();
  const res = await t.app.handle(
    new Request(`${BASE}/v1/messages`, {
      method: "POST",
      signal: leave.signal,
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ ...body, max_tokens: 32_000, stream: true }),
    }),
  );
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  const first = new TextDecoder().decode((await reader.read()).value);
  expect(first).toContain("event: message_start");
  leave.abort();
  await reader.cancel().catch(() => {});
  for (let i = 0; i < 400 && t.deps.registry.engine("demo-chat", "chat").stats().busy > 0; i++) await Bun.sleep(5);
  expect(t.deps.registry.engine("demo-chat", "chat").stats().busy).toBe(0);
}, 120_000);
