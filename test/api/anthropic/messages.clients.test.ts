import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import type OpenAI from "openai";
import type { TestApp } from "../../helpers/app";
import { chatTestApp, forced } from "../../helpers/chat";
import { anthropicClient } from "./client";

// What Claude Code and the SDK's structured output send (notes/platform.md "Third-party clients"),
// through the official client against the real app and the tiny models.

let t: TestApp & { openai: (key: string) => OpenAI };
let client: Anthropic;
let key: string;
beforeAll(async () => {
  t = await chatTestApp();
  key = await t.key({ creditUsd: 5 });
  client = anthropicClient(t, { apiKey: key });
});
afterAll(() => t.close());
setDefaultTimeout(30_000);

async function sdkError(p: Promise<unknown>): Promise<InstanceType<typeof Anthropic.APIError>> {
  const err = await p.then(() => null, (e) => e);
  expect(err).toBeInstanceOf(Anthropic.APIError);
  return err;
}

describe("output_config", () => {
  const schema = { type: "object", properties: { mood: { enum: ["happy", "sad", "calm"] }, ok: { type: "boolean" } }, required: ["mood", "ok"], additionalProperties: false };

  test("format json_schema is enforced: the answer is JSON that parses and fits the schema", async () => {
    const r = await client.messages.create({
      model: "chat",
      max_tokens: 60,
      temperature: 0,
      messages: [{ role: "user", content: "How do you feel?" }],
      output_config: { format: { type: "json_schema", schema } },
    } as any);
    expect(r.stop_reason).toBe("end_turn");
    const text = r.content.filter((b) => b.type === "text").map((b) => (b as Anthropic.TextBlock).text).join("");
    const out = JSON.parse(text);
    expect(["happy", "sad", "calm"]).toContain(out.mood);
    expect(typeof out.ok).toBe("boolean");
  });

  test("a structured-output schema keyword no grammar can express is refused naming output_config.format", async () => {
    const err = await sdkError(
      client.messages.create({
        model: "chat",
        max_tokens: 20,
        messages: [{ role: "user", content: "hi" }],
        output_config: { format: { type: "json_schema", schema: { type: "object", properties: { n: { type: "array", uniqueItems: true } } } } },
      } as any),
    );
    expect(err.status).toBe(400);
    expect((err.error as any).error.message).toContain("output_config.format.schema");
  });

  test("adaptive thinking thinks at effort high and answers directly at effort low (Claude Code's shape)", async () => {
    const ask = (effort: string) =>
      client.messages.create({
        model: "chat",
        max_tokens: 30,
        temperature: 0,
        thinking: { type: "adaptive" },
        output_config: { effort },
        context_management: { edits: [] },
        messages: [{ role: "user", content: `Think first. ${forced("<think>\nA greeting.\n</think>\n\nHi")}` }],
      } as any);
    const high = await ask("high");
    expect(high.content[0]!.type).toBe("thinking");
    const low = await ask("low");
    expect(low.content.some((b) => b.type === "thinking")).toBe(false);
  });
});

describe("context overflow in Anthropic's words", () => {
  test("input and max_tokens over the window: `A + B > C`, and a retry with a smaller max_tokens succeeds (as Claude Code retries)", async () => {
    const messages = [{ role: "user" as const, content: "word ".repeat(60) }];
    const err = await sdkError(client.messages.create({ model: "tight", max_tokens: 4000, messages }));
    expect(err).toBeInstanceOf(Anthropic.BadRequestError);
    const message = (err.error as any).error.message as string;
    const m = /^input length and `max_tokens` exceed context limit: (\d+) \+ 4000 > 256, decrease input length or `max_tokens` and try again$/.exec(message);
    expect(m).not.toBeNull();
    const room = 256 - Number(m![1]);
    const r = await client.messages.create({ model: "tight", max_tokens: Math.min(room, 8), messages, thinking: { type: "disabled" } });
    expect(r.type).toBe("message");
  });

  test("a prompt over the window: `prompt is too long: N tokens > M maximum`", async () => {
    const err = await sdkError(client.messages.create({ model: "tight", max_tokens: 1, messages: [{ role: "user", content: "word ".repeat(400) }] }));
    expect((err.error as any).error.message).toMatch(/^prompt is too long: \d+ tokens > 256 maximum$/);
  });

  test("the OpenAI formats keep their own wording", async () => {
    const openai = t.openai(await t.key({ creditUsd: 1 }));
    const err = await openai.chat.completions.create({ model: "tight", max_tokens: 32000, messages: [{ role: "user", content: "word ".repeat(60) }] }).catch((e) => e);
    expect(err.code).toBe("context_length_exceeded");
    expect(err.message).toContain("context window is 256 tokens");
  });
});

test("a Claude-Code-like request (test/fixtures/requests): max_tokens 32000 over a 4,096-token window gets Anthropic's overflow words; the retry it makes with what is left streams an answer", async () => {
  const body = JSON.parse(require("node:fs").readFileSync(require("node:path").join(import.meta.dir, "../../fixtures/requests/messages-claude-code.json"), "utf8"));
  const first = await t.request("POST", "/v1/messages?beta=true", { key, body });
  expect(first.status).toBe(400);
  const { error } = (await first.json()) as { error: { type: string; message: string } };
  expect(error.type).toBe("invalid_request_error");
  const m = /^input length and `max_tokens` exceed context limit: (\d+) \+ 32000 > 4096, decrease input length or `max_tokens` and try again$/.exec(error.message);
  expect(m).not.toBeNull();
  const retry = await t.request("POST", "/v1/messages?beta=true", { key, body: { ...body, max_tokens: Math.min(4096 - Number(m![1]), 24) } });
  expect(retry.status).toBe(200);
  const text = await retry.text();
  expect(text).toContain("event: message_stop");
});

describe("tool search (Claude Code's ToolSearch: tools with defer_loading, found ones named by tool_reference blocks)", () => {
  const tools = [
    { name: "ToolSearch", description: "Finds tools", input_schema: { type: "object", properties: { query: { type: "string" } } } },
    { name: "Read", description: "Reads a file", input_schema: { type: "object", properties: { path: { type: "string" } } }, defer_loading: true },
  ];
  const turns = (content: unknown[]) => [
    { role: "user", content: "find a tool to read files" },
    { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "ToolSearch", input: { query: "read" } }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content }] },
  ];

  test("a tool_result holding tool_reference blocks, with deferred tools, is answered (a full Claude Code run saw it refused 400)", async () => {
    const r = await client.messages.create({ model: "chat", max_tokens: 8, tools, messages: turns([{ type: "tool_reference", tool_name: "Read" }, { type: "text", text: "1 tool found" }]) } as any);
    expect(r.type).toBe("message");
    const counted = await client.messages.countTokens({ model: "chat", tools, messages: turns([{ type: "tool_reference", tool_name: "Read" }]) } as any);
    const without = await client.messages.countTokens({ model: "chat", tools, messages: turns([]) } as any);
    expect(counted.input_tokens).toBeGreaterThan(without.input_tokens); // the model reads which tool was found
  });

  test("a tool_reference without its tool_name is a 400 naming it", async () => {
    const err = await sdkError(client.messages.create({ model: "chat", max_tokens: 8, tools, messages: turns([{ type: "tool_reference" }]) } as any));
    expect(err.status).toBe(400);
    expect(err.message).toContain("messages[2].content[0].content[0].tool_name");
  });
});
