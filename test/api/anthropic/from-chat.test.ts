import { describe, expect, test } from "bun:test";
import {
  fromChatCompletion,
  mapStopReason,
  parseToolInput,
  thinkingSignature,
  toMessageId,
  toMessagesUsage,
  toToolUseId,
} from "../../../src/1-api/anthropic/from-chat";
import type { ChatCompletion, Usage } from "../../../src/2-services/chat/completion";

const usage = (prompt: number, completion: number, cached = 0, reasoning = 0): Usage => ({
  prompt_tokens: prompt,
  completion_tokens: completion,
  total_tokens: prompt + completion,
  prompt_tokens_details: { cached_tokens: cached },
  completion_tokens_details: { reasoning_tokens: reasoning },
});

const completion = (message: Partial<ChatCompletion["choices"][0]["message"]>, finish: ChatCompletion["choices"][0]["finish_reason"] = "stop", u = usage(10, 5)): ChatCompletion => ({
  id: "chatcmpl-abc",
  object: "chat.completion",
  created: 1,
  model: "chat",
  choices: [{ index: 0, message: { role: "assistant", content: "", ...message }, finish_reason: finish }],
  usage: u,
});

describe("stop reasons", () => {
  test.each([
    { finish: "stop", stop: null, expected: "end_turn" },
    { finish: "stop", stop: "END", expected: "stop_sequence" },
    { finish: "length", stop: null, expected: "max_tokens" },
    { finish: "tool_calls", stop: null, expected: "tool_use" },
  ] as const)("$finish with stop sequence $stop → $expected", ({ finish, stop, expected }) => {
    expect(mapStopReason(finish, stop)).toBe(expected);
  });
});

describe("usage", () => {
  test.each([
    { name: "nothing cached", input: usage(100, 7), expected: { input_tokens: 100, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 7, output_tokens_details: { thinking_tokens: 0 } } },
    { name: "cached tokens are counted apart from input_tokens", input: usage(100, 7, 90), expected: { input_tokens: 10, cache_creation_input_tokens: 0, cache_read_input_tokens: 90, output_tokens: 7, output_tokens_details: { thinking_tokens: 0 } } },
    { name: "thinking tokens are inside output_tokens", input: usage(20, 30, 0, 12), expected: { input_tokens: 20, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 30, output_tokens_details: { thinking_tokens: 12 } } },
  ])("$name", ({ input, expected }) => {
    const u = toMessagesUsage(input);
    expect(u).toEqual(expected);
    expect(u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens).toBe(input.prompt_tokens);
  });
});

describe("ids, tool input and signatures", () => {
  test("ids keep the completion's and the call's suffix", () => {
    expect(toMessageId("chatcmpl-Xy1")).toBe("msg_Xy1");
    expect(toToolUseId("call_Q9")).toBe("toolu_Q9");
  });

  test.each([
    { args: '{"city":"Oslo"}', expected: { city: "Oslo" } },
    { args: "{}", expected: {} },
    { args: '{"city": "Os', expected: {} },
    { args: "", expected: {} },
    { args: "[1]", expected: {} },
  ])("tool arguments $args → input", ({ args, expected }) => {
    expect(parseToolInput(args)).toEqual(expected);
  });

  test("a signature is opaque, deterministic and differs with the text", () => {
    expect(thinkingSignature("a")).toBe(thinkingSignature("a"));
    expect(thinkingSignature("a")).not.toBe(thinkingSignature("b"));
    expect(thinkingSignature("a")).not.toContain("a");
  });
});

describe("messages", () => {
  test.each([
    {
      name: "a text answer",
      input: completion({ content: "Hello!" }),
      ctx: { thinking: "off", stopSequence: null },
      expected: { content: [{ type: "text", text: "Hello!" }], stop_reason: "end_turn", stop_sequence: null },
    },
    {
      name: "an answer ended by a stop sequence names it",
      input: completion({ content: "Hello " }),
      ctx: { thinking: "off", stopSequence: "there" },
      expected: { content: [{ type: "text", text: "Hello " }], stop_reason: "stop_sequence", stop_sequence: "there" },
    },
    {
      name: "a cut answer is max_tokens, with no stop sequence",
      input: completion({ content: "Hel" }, "length"),
      ctx: { thinking: "off", stopSequence: null },
      expected: { content: [{ type: "text", text: "Hel" }], stop_reason: "max_tokens", stop_sequence: null },
    },
    {
      name: "thinking asked: a thinking block with a signature, then the text without the separator",
      input: completion({ content: "\n\nHi", reasoning_content: "The user says hi." }),
      ctx: { thinking: "shown", stopSequence: null },
      expected: { content: [{ type: "thinking", thinking: "The user says hi.", signature: thinkingSignature("The user says hi.") }, { type: "text", text: "Hi" }] },
    },
    {
      name: "thinking omitted: the block is there, signed, without its text",
      input: completion({ content: "Hi", reasoning_content: "secret" }),
      ctx: { thinking: "omitted", stopSequence: null },
      expected: { content: [{ type: "thinking", thinking: "", signature: thinkingSignature("secret") }, { type: "text", text: "Hi" }] },
    },
    {
      name: "thinking not asked: no thinking block, and the text as it is",
      input: completion({ content: "\n\nHi", reasoning_content: "hidden" }),
      ctx: { thinking: "off", stopSequence: null },
      expected: { content: [{ type: "text", text: "\n\nHi" }] },
    },
    {
      name: "tool calls after text are tool_use blocks with parsed input",
      input: completion(
        {
          content: "Checking.",
          tool_calls: [
            { id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Oslo"}' } },
            { id: "call_2", type: "function", function: { name: "get_time", arguments: '{"zone":"utc"}' } },
          ],
        },
        "tool_calls",
      ),
      ctx: { thinking: "off", stopSequence: null },
      expected: {
        content: [
          { type: "text", text: "Checking." },
          { type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Oslo" } },
          { type: "tool_use", id: "toolu_2", name: "get_time", input: { zone: "utc" } },
        ],
        stop_reason: "tool_use",
      },
    },
    {
      name: "only tool calls: no empty text block",
      input: completion({ content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "f", arguments: "{}" } }] }, "tool_calls"),
      ctx: { thinking: "off", stopSequence: null },
      expected: { content: [{ type: "tool_use", id: "toolu_1", name: "f", input: {} }], stop_reason: "tool_use" },
    },
    {
      name: "an empty answer has no blocks",
      input: completion({ content: "" }),
      ctx: { thinking: "shown", stopSequence: null },
      expected: { content: [], stop_reason: "end_turn" },
    },
  ] as const)("$name", ({ input, ctx, expected }) => {
    const m = fromChatCompletion(input, ctx);
    expect(m).toMatchObject(expected);
    expect(Object.keys(m)).toEqual(["id", "type", "role", "model", "content", "stop_reason", "stop_sequence", "usage"]);
    expect(m).toMatchObject({ id: "msg_abc", type: "message", role: "assistant", model: "chat" });
  });
});
