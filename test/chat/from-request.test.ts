import { describe, expect, test } from "bun:test";
import type { ChatRequest } from "../../src/2-services/chat/request";
import { ApiError } from "../../src/1-api/http/errors";
import { toChatJob } from "../../src/2-services/chat/from-request";

const base = (extra: Partial<ChatRequest> = {}): ChatRequest => ({ model: "m", messages: [{ role: "user", content: "hi" }], ...extra });

function refusal(req: ChatRequest): { param: string | null; message: string } {
  try {
    toChatJob(req);
  } catch (e) {
    expect(e).toBeInstanceOf(ApiError);
    return { param: (e as ApiError).param, message: (e as ApiError).message };
  }
  throw new Error("expected a 400");
}

const weather = { type: "function" as const, function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } };

describe("translation", () => {
  test.each([
    {
      name: "string content, system and developer roles",
      input: base({ messages: [{ role: "developer", content: "be brief" }, { role: "system", content: [{ type: "text", text: "a" }, { type: "text", text: "b" }] }, { role: "user", content: "hi" }] }),
      expected: { turns: [{ role: "system", text: "be brief" }, { role: "system", text: "a\nb" }, { role: "user", text: "hi", images: [] }] },
    },
    {
      name: "an image part is kept with where it was",
      input: base({ messages: [{ role: "user", content: [{ type: "text", text: "what is this" }, { type: "image_url", image_url: { url: "data:image/png;base64,AAAA" } }] }] }),
      expected: { turns: [{ role: "user", text: "what is this", images: [{ url: "data:image/png;base64,AAAA", param: "messages[0].content[1]" }] }] },
    },
    {
      name: "assistant tool calls and their results",
      input: base({
        tools: [weather],
        messages: [
          { role: "user", content: "weather?" },
          { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Oslo"}' } }] },
          { role: "tool", tool_call_id: "call_1", content: "rain" },
        ],
      }),
      expected: {
        toolChoice: "auto",
        turns: [
          { role: "user", text: "weather?", images: [] },
          { role: "assistant", text: "", reasoning: "", toolCalls: [{ id: "call_1", name: "get_weather", arguments: '{"city":"Oslo"}' }] },
          { role: "tool", toolCallId: "call_1", text: "rain" },
        ],
      },
    },
    { name: "max_completion_tokens wins over max_tokens", input: base({ max_tokens: 10, max_completion_tokens: 20 }), expected: { maxTokens: 20 } },
    { name: "a single stop string", input: base({ stop: "END" }), expected: { stop: ["END"] } },
    { name: "top_k (an extension, as llama.cpp's server)", input: base({ top_k: 40, top_p: 0.5 }), expected: { sampling: expect.objectContaining({ topK: 40, topP: 0.5 }) } },
    { name: "thinking off by template kwargs", input: base({ chat_template_kwargs: { enable_thinking: false } }), expected: { thinking: false } },
    { name: "reasoning_effort none: thinking off", input: base({ reasoning_effort: "none" }), expected: { thinking: false } },
    { name: "reasoning_effort minimal: thinking off", input: base({ reasoning_effort: "minimal" }), expected: { thinking: false } },
    { name: "reasoning_effort low: thinking on", input: base({ reasoning_effort: "low" }), expected: { thinking: true } },
    { name: "reasoning_effort high: thinking on", input: base({ reasoning_effort: "high" }), expected: { thinking: true } },
    { name: "no reasoning_effort: the model's default", input: base(), expected: { thinking: null } },
    { name: "template kwargs win over reasoning_effort", input: base({ reasoning_effort: "high", chat_template_kwargs: { enable_thinking: false } }), expected: { thinking: false } },
    {
      name: "the fields clients send by default are accepted; prompt_cache_key becomes the job's cache key",
      input: base({ verbosity: "low", prompt_cache_key: "k", safety_identifier: "u1", service_tier: "auto", store: false, metadata: { a: "b" } }),
      expected: { model: "m", cacheKey: "k" },
    },
    { name: "streams carry usage by default", input: base({ stream: true }), expected: { stream: true, includeUsage: true } },
    { name: "include_usage false is respected", input: base({ stream: true, stream_options: { include_usage: false } }), expected: { includeUsage: false } },
    { name: "tool_choice naming a function", input: base({ tools: [weather], tool_choice: { type: "function", function: { name: "get_weather" } } }), expected: { toolChoice: { name: "get_weather" } } },
    { name: "a tool with strict: true is strict (its schema enforced)", input: base({ tools: [{ ...weather, function: { ...weather.function, strict: true } }] }), expected: { tools: [expect.objectContaining({ strict: true })] } },
    { name: "a tool without strict: true is not (its schema a hint)", input: base({ tools: [{ ...weather, function: { ...weather.function, strict: false } }, { type: "function", function: { name: "b" } }] }), expected: { tools: [expect.not.objectContaining({ strict: true }), expect.not.objectContaining({ strict: true })] } },
    { name: "json_schema format", input: base({ response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "object" } } } }), expected: { format: { type: "json_schema", name: "x", schema: { type: "object" } } } },
    // Instructor's JSON_SCHEMA mode; llama-server and vLLM honour the schema too (issue 42: it was ignored).
    { name: "json_object with a schema enforces the schema", input: base({ response_format: { type: "json_object", schema: { type: "object", properties: { n: { type: "number" } } } } }), expected: { format: { type: "json_schema", name: "output", schema: { type: "object", properties: { n: { type: "number" } } } } } },
    { name: "json_object without a schema is any object", input: base({ response_format: { type: "json_object" } }), expected: { format: { type: "json_object" } } },
    // json_object's answer is an object: a schema without a type means one (as a tool's parameters do), and
    // an error the grammar raises later names the field the schema came in (issue 42).
    { name: "json_object with an empty schema is any object, named as sent", input: base({ response_format: { type: "json_object", schema: {} } }), expected: { format: { type: "json_schema", name: "output", schema: { type: "object" }, param: "response_format.schema" } } },
    { name: "json_object with a union keeps its object members", input: base({ response_format: { type: "json_object", schema: { anyOf: [{ type: "string" }, { type: "object" }] } } }), expected: { format: { type: "json_schema", schema: { anyOf: [{ type: "object" }] } } } },
    { name: "logit_bias keys become token ids", input: base({ logit_bias: { "42": -100 } }), expected: { sampling: expect.objectContaining({ logitBias: new Map([[42, -100]]) }) } },
  ])("$name", ({ input, expected }) => {
    expect(toChatJob(input)).toMatchObject(expected as object);
  });
});

describe("refusals name the field", () => {
  test.each([
    { name: "n other than 1", input: base({ n: 2 }), param: "n" },
    { name: "logprobs", input: base({ logprobs: true }), param: "logprobs" },
    { name: "an unknown part type", input: base({ messages: [{ role: "user", content: [{ type: "input_audio" }] }] }), param: "messages[0].content[0].type" },
    { name: "an image in a system message", input: base({ messages: [{ role: "system", content: [{ type: "image_url", image_url: { url: "x" } }] }] }), param: "messages[0].content[0].type" },
    { name: "a text part without text", input: base({ messages: [{ role: "user", content: [{ type: "text" }] }] }), param: "messages[0].content[0].text" },
    { name: "a user message without content", input: base({ messages: [{ role: "user" }] }), param: "messages[0].content" },
    { name: "a tool result that answers nothing", input: base({ messages: [{ role: "user", content: "x" }, { role: "tool", tool_call_id: "call_9", content: "r" }] }), param: "messages[1].tool_call_id" },
    {
      name: "tool call arguments that are not JSON",
      input: base({ messages: [{ role: "user", content: "x" }, { role: "assistant", tool_calls: [{ id: "c", function: { name: "f", arguments: "{nope" } }] }] }),
      param: "messages[1].tool_calls[0].function.arguments",
    },
    { name: "an unknown tool_choice string", input: base({ tools: [weather], tool_choice: "sometimes" }), param: "tool_choice" },
    { name: "tool_choice naming a missing tool", input: base({ tools: [weather], tool_choice: { type: "function", function: { name: "nope" } } }), param: "tool_choice.function.name" },
    { name: "required without tools", input: base({ tool_choice: "required" }), param: "tool_choice" },
    { name: "duplicate tool names", input: base({ tools: [weather, weather] }), param: "tools[1].function.name" },
    { name: "json_schema without a schema", input: base({ response_format: { type: "json_schema", json_schema: { name: "x" } } }), param: "response_format.json_schema.schema" },
    { name: "a schema beside json_schema's own", input: base({ response_format: { type: "json_schema", json_schema: { name: "x", schema: {} }, schema: { type: "object" } } }), param: "response_format.schema" },
    { name: "a json_object schema that admits no object", input: base({ response_format: { type: "json_object", schema: { type: "array" } } }), param: "response_format.schema.type" },
    { name: "a json_object schema past the bounds (measured as json_schema's)", input: base({ response_format: { type: "json_object", schema: { $ref: "#/$defs/Nope" } } }), param: "response_format.schema.$ref" },
    { name: "an unknown reasoning_effort", input: base({ reasoning_effort: "maximal" }), param: "reasoning_effort" },
    { name: "a logit_bias key that is not a token id", input: base({ logit_bias: { abc: 1 } }), param: "logit_bias.abc" },
  ])("$name", ({ input, param }) => {
    const r = refusal(input);
    expect(r.param).toBe(param);
    expect(r.message.startsWith(`${param}: `)).toBe(true);
  });
});
