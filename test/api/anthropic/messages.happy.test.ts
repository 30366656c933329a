import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type Anthropic from "@anthropic-ai/sdk";
import { thinkingSignature } from "../../../src/1-api/anthropic/from-chat";
import { chatTestApp, forced } from "../../helpers/chat";
import type { TestApp } from "../../helpers/app";
import { anthropicClient } from "./client";
import { checkMessagesStream, foldMessagesStream, parseSse } from "./invariants";

// The official @anthropic-ai/sdk against the real app and the tiny generated chat model.

let t: TestApp;
let key: string;
let client: Anthropic;
beforeAll(async () => {
  t = await chatTestApp();
  key = await t.key({ creditUsd: 5 });
  client = anthropicClient(t, { apiKey: key });
});
afterAll(() => t.close());

const user = (content: string): Anthropic.MessageParam[] => [{ role: "user", content }];
/** temperature is on the wire but no longer in this SDK's request types: greedy sampling for equal answers. */
const greedy = (p: Anthropic.MessageCreateParamsNonStreaming) => ({ ...p, temperature: 0 }) as Anthropic.MessageCreateParamsNonStreaming;
const THOUGHT = "<think>\nLet me think about it.\n</think>\n\nDone";

const weather: Anthropic.Tool = {
  name: "get_weather",
  description: "Weather for a city",
  input_schema: { type: "object", properties: { city: { type: "string", maxLength: 12 } }, required: ["city"] },
};
const callWeather = forced('<tool_call>\n{"name": "get_weather", "arguments": ');

/** The raw SSE of a streamed request, checked against every stream invariant. */
async function rawStream(body: object) {
  const res = await t.request("POST", "/v1/messages", { key, body: { ...body, stream: true } });
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toBe("text/event-stream; charset=utf-8");
  const events = parseSse(await res.text());
  checkMessagesStream(events);
  return events;
}

describe("plain answers", () => {
  test("messages.create returns one message with a text block and usage", async () => {
    const m = await client.messages.create(greedy({ model: "chat", max_tokens: 8, messages: user("Hello!") }));
    expect(m.id).toMatch(/^msg_/);
    expect(m.type).toBe("message");
    expect(m.role).toBe("assistant");
    expect(m.model).toBe("chat");
    expect(m.content.map((b) => b.type)).toEqual(["text"]);
    expect(["end_turn", "max_tokens"]).toContain(m.stop_reason!);
    expect(m.stop_sequence).toBeNull();
    expect(m.usage.input_tokens + m.usage.cache_read_input_tokens!).toBeGreaterThan(5);
    expect(m.usage.cache_creation_input_tokens).toBe(0);
    expect(m.usage.output_tokens).toBeGreaterThan(0);
    expect(m.usage.output_tokens).toBeLessThanOrEqual(8);
  });

  test("messages.stream's finalMessage equals the non-streamed message at temperature 0", async () => {
    const params = greedy({ model: "chat", max_tokens: 12, system: "Be brief.", messages: user("Stream this please.") });
    const whole = await client.messages.create(params);
    const stream = client.messages.stream(params);
    let text = "";
    stream.on("text", (d) => (text += d));
    const final = await stream.finalMessage();
    expect(final.content as Anthropic.ContentBlock[]).toEqual(whole.content);
    expect(text).toBe((whole.content[0] as Anthropic.TextBlock).text);
    expect(final.stop_reason).toBe(whole.stop_reason);
    expect(final.usage.output_tokens).toBe(whole.usage.output_tokens);
    expect(final.usage.input_tokens + final.usage.cache_read_input_tokens!).toBe(whole.usage.input_tokens + whole.usage.cache_read_input_tokens!);
    expect(final.id).not.toBe(whole.id);
  });

  test("the raw stream is SSE with event names, and folds into the message a client rebuilds", async () => {
    // greedy: at the default temperature a random-weights model may end before 6 tokens
    const events = await rawStream({ model: "chat", max_tokens: 6, temperature: 0, messages: user("hi") });
    expect(events.map((e) => e.event)).toContain("content_block_delta");
    const m = foldMessagesStream(events);
    expect(m.stop_reason).toBe("max_tokens");
    expect(m.usage.output_tokens).toBe(6);
  });

  test("a repeated prompt reads the slot's cache without any cache marker", async () => {
    const params = greedy({ model: "chat", max_tokens: 2, messages: user("Same prompt twice, with enough words to cache.") });
    const first = await client.messages.create(params);
    const again = await client.messages.create(params);
    const prompt = first.usage.input_tokens + first.usage.cache_read_input_tokens!;
    expect(again.usage.cache_read_input_tokens).toBe(prompt - 1);
    expect(again.usage.input_tokens).toBe(1);
  });

  test("stop_sequences end the answer with stop_reason stop_sequence and the string", async () => {
    const m = await client.messages.create(greedy({ model: "chat", max_tokens: 20, stop_sequences: ["there"], messages: user(`Hi ${forced("Hello there friend")}`) }));
    expect(m.stop_reason).toBe("stop_sequence");
    expect(m.stop_sequence).toBe("there");
    expect((m.content[0] as Anthropic.TextBlock).text).toBe("Hello ");
  });

  test("max_tokens cuts the answer with stop_reason max_tokens", async () => {
    const m = await client.messages.create(greedy({ model: "chat", max_tokens: 5, messages: user("Tell me a long story.") }));
    expect(m.stop_reason).toBe("max_tokens");
    expect(m.usage.output_tokens).toBe(5);
  });

  test("a trailing assistant turn is continued", async () => {
    const m = await client.messages.create({
      model: "chat",
      max_tokens: 4,
      messages: [...user(`Greet ${forced("Hello there")}`), { role: "assistant", content: "Well," }],
    });
    expect(m.content[0]!.type).toBe("text");
  });
});

describe("thinking", () => {
  test("thinking enabled: a signed thinking block, then the text block", async () => {
    const m = await client.messages.create(greedy({ model: "chat", max_tokens: 24, thinking: { type: "enabled", budget_tokens: 1024 }, messages: user(`Think. ${forced(THOUGHT)}`) }));
    expect(m.content.map((b) => b.type)).toEqual(["thinking", "text"]);
    const thinking = m.content[0] as Anthropic.ThinkingBlock;
    expect(thinking.thinking).toBe("Let me think about it.");
    expect(thinking.signature).toBe(thinkingSignature(thinking.thinking));
    expect((m.content[1] as Anthropic.TextBlock).text.startsWith("Done")).toBe(true);
    expect(m.usage.output_tokens_details!.thinking_tokens).toBeGreaterThan(3);
  });

  test("streamed thinking has thinking and signature deltas and folds into the same blocks", async () => {
    const params = greedy({ model: "chat", max_tokens: 24, thinking: { type: "adaptive" as const }, messages: user(`Think. ${forced(THOUGHT)}`) });
    const whole = await client.messages.create(params);
    const final = await client.messages.stream(params).finalMessage();
    expect(final.content as Anthropic.ContentBlock[]).toEqual(whole.content);
    const events = await rawStream(params);
    const deltas = events.filter((e) => e.event === "content_block_delta").map((e) => e.data.delta.type);
    expect(deltas).toContain("thinking_delta");
    expect(deltas.filter((d) => d === "signature_delta")).toHaveLength(1);
  });

  test("thinking not asked: no thinking block and no thinking tokens", async () => {
    const m = await client.messages.create(greedy({ model: "chat", max_tokens: 8, messages: user("Answer directly.") }));
    expect(m.content.some((b) => b.type === "thinking")).toBe(false);
    expect(m.usage.output_tokens_details!.thinking_tokens).toBe(0);
  });

  test("thinking blocks sent back in the history are accepted with any signature", async () => {
    const m = await client.messages.create({
      model: "chat",
      max_tokens: 4,
      messages: [
        ...user("Q1"),
        { role: "assistant", content: [{ type: "thinking", thinking: "hm", signature: "not-ours" }, { type: "redacted_thinking", data: "x" }, { type: "text", text: "A1" }] },
        ...user("Q2"),
      ],
    });
    expect(m.type).toBe("message");
  });
});

describe("tools", () => {
  test("tool use round trip: the model calls a tool, the client answers it, the model goes on", async () => {
    const first = await client.messages.create(greedy({ model: "chat", max_tokens: 60, tools: [weather], tool_choice: { type: "auto", disable_parallel_tool_use: true }, messages: user(`Weather in Oslo? ${callWeather}`) }));
    expect(first.stop_reason).toBe("tool_use");
    const calls = first.content.filter((b): b is Anthropic.ToolUseBlock => b.type === "tool_use");
    expect(calls.length).toBeGreaterThanOrEqual(1);
    for (const c of calls) {
      expect(c.id).toMatch(/^toolu_/);
      expect(c.name).toBe("get_weather");
      expect(typeof (c.input as { city: string }).city).toBe("string");
    }
    const second = await client.messages.create({
      model: "chat",
      max_tokens: 6,
      tools: [weather],
      messages: [
        ...user("Weather in Oslo?"),
        { role: "assistant", content: first.content },
        { role: "user", content: calls.map((c) => ({ type: "tool_result" as const, tool_use_id: c.id, content: [{ type: "text" as const, text: "3C, rain" }] })) },
      ],
    });
    expect(second.type).toBe("message");
    expect(second.usage.input_tokens + second.usage.cache_read_input_tokens!).toBeGreaterThan(first.usage.input_tokens + first.usage.cache_read_input_tokens!);
  });

  test("a streamed tool call opens tool_use blocks whose input_json deltas make the same input", async () => {
    const params = greedy({ model: "chat", max_tokens: 60, tools: [weather], tool_choice: { type: "tool" as const, name: "get_weather", disable_parallel_tool_use: true }, messages: user("Weather in Oslo?") });
    const whole = await client.messages.create(params);
    expect(whole.stop_reason).toBe("tool_use");
    expect(whole.content.map((b) => b.type)).toEqual(["tool_use"]);
    const final = await client.messages.stream(params).finalMessage();
    expect(final.content.map((b) => ({ ...b, id: undefined }))).toEqual(whole.content.map((b) => ({ ...b, id: undefined })));
    const events = await rawStream(params);
    expect(events.filter((e) => e.event === "content_block_start").map((e) => e.data.content_block.type)).toEqual(["tool_use"]);
  });

  test("a tool call after text opens a second block", async () => {
    const events = await rawStream({
      model: "chat",
      max_tokens: 60,
      temperature: 0,
      tools: [weather],
      tool_choice: { type: "auto", disable_parallel_tool_use: true },
      messages: user(`Weather? ${forced('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": ')}`),
    });
    const starts = events.filter((e) => e.event === "content_block_start").map((e) => e.data.content_block);
    expect(starts.map((b) => b.type)).toEqual(["text", "tool_use"]);
    expect(starts[1].id).toMatch(/^toolu_/);
    expect(foldMessagesStream(events).stop_reason).toBe("tool_use");
  });

  test("parallel tool calls stream as consecutive tool_use blocks with distinct ids", async () => {
    const events = await rawStream({ model: "chat", max_tokens: 400, temperature: 0, tools: [weather], tool_choice: { type: "any" }, messages: user("Weather everywhere.") });
    const m = foldMessagesStream(events);
    const calls = m.content.filter((b: { type: string }) => b.type === "tool_use");
    expect(calls.length).toBeGreaterThanOrEqual(2);
    expect(new Set(calls.map((c: { id: string }) => c.id)).size).toBe(calls.length);
    expect(["tool_use", "max_tokens"]).toContain(m.stop_reason);
  });

  test("tool_choice any makes the model call a tool; none keeps it from calling one", async () => {
    const any = await client.messages.create(greedy({ model: "chat", max_tokens: 60, tools: [weather], tool_choice: { type: "any", disable_parallel_tool_use: true }, messages: user("Do something.") }));
    expect(any.stop_reason).toBe("tool_use");
    const none = await client.messages.create(greedy({ model: "chat", max_tokens: 8, tools: [weather], tool_choice: { type: "none" }, messages: user(`Hi ${forced("<tool_call>")}`) }));
    expect(none.content.some((b) => b.type === "tool_use")).toBe(false);
  });
});

describe("count_tokens", () => {
  test("messages.countTokens equals the whole prompt of a real call with the same body", async () => {
    const body = { model: "chat", system: [{ type: "text" as const, text: "You are terse." }], tools: [weather], messages: user("How many tokens is this?") };
    const counted = await client.messages.countTokens(body);
    const m = await client.messages.create({ ...body, max_tokens: 1 });
    expect(counted.input_tokens).toBe(m.usage.input_tokens + m.usage.cache_read_input_tokens! + m.usage.cache_creation_input_tokens!);
    const withThinking = await client.messages.countTokens({ ...body, thinking: { type: "adaptive" } });
    expect(withThinking.input_tokens).toBeGreaterThan(0);
  });
});

describe("keys", () => {
  test("x-api-key and Authorization: Bearer are both accepted", async () => {
    for (const auth of [{ apiKey: key }, { authToken: key }]) {
      const m = await anthropicClient(t, auth).messages.create({ model: "chat", max_tokens: 1, messages: user("hi") });
      expect(m.type).toBe("message");
    }
  });

  test("the ?beta=true query a coding assistant appends is accepted on both paths", async () => {
    const headers = { "x-api-key": key, "anthropic-version": "2023-06-01", "anthropic-beta": "interleaved-thinking-2025-05-14" };
    const m = await t.request("POST", "/v1/messages?beta=true", { headers, body: { model: "chat", max_tokens: 1, messages: user("hi") } });
    expect((await m.json()).type).toBe("message");
    const c = await t.request("POST", "/v1/messages/count_tokens?beta=true", { headers, body: { model: "chat", messages: user("hi") } });
    expect((await c.json()).input_tokens).toBeGreaterThan(0);
  });

  test("responses carry the request id in request-id", async () => {
    const { response } = await client.messages.create({ model: "chat", max_tokens: 1, messages: user("hi") }).withResponse();
    expect(response.headers.get("request-id")).toMatch(/^req_/);
  });
});
