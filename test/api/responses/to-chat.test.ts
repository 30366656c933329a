import { describe, expect, test } from "bun:test";
import { Value } from "@sinclair/typebox/value";
import { ApiError } from "../../../src/1-api/http/errors";
import { ChatRequest } from "../../../src/2-services/chat/request";
import { ResponsesRequest } from "../../../src/1-api/responses/schema";
import { decodeThought, encodeThought } from "../../../src/1-api/responses/reasoning";
import { namespacedName, toChatRequest, toResponsesError, toResponsesParam } from "../../../src/1-api/responses/to-chat";
import { toChatJob } from "../../../src/2-services/chat/from-request";

// Every translation rule of spec §2.5 and every refusal, as tables (STYLE "Converters").

const req = (fields: Record<string, unknown>) => ({ model: "chat", input: "hi", ...fields }) as ResponsesRequest;
const weather = { type: "function", name: "get_weather", description: "Weather", parameters: { type: "object", properties: { city: { type: "string" } } }, strict: true };
const chatWeather = { type: "function", function: { name: "get_weather", description: "Weather", parameters: { type: "object", properties: { city: { type: "string" } } }, strict: true } };
const image = "data:image/png;base64,iVBORw0KGgo=";

const translations: { name: string; input: Record<string, unknown>; expected: Record<string, unknown> }[] = [
  { name: "a string input is one user message", input: {}, expected: { messages: [{ role: "user", content: "hi" }] } },
  { name: "instructions become the system message, first", input: { instructions: "Be brief." }, expected: { messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "hi" }] } },
  {
    name: "message items keep their roles; developer stays developer; parts become text and image_url parts",
    input: {
      input: [
        { role: "system", content: "S" },
        { type: "message", role: "developer", content: [{ type: "input_text", text: "D" }] },
        { type: "message", role: "user", content: [{ type: "input_text", text: "look" }, { type: "input_image", image_url: image, detail: "low" }] },
        { type: "message", role: "assistant", id: "msg_1", status: "completed", content: [{ type: "output_text", text: "A", annotations: [], logprobs: [] }] },
      ],
    },
    expected: {
      messages: [
        { role: "system", content: "S" },
        { role: "developer", content: [{ type: "text", text: "D" }] },
        { role: "user", content: [{ type: "text", text: "look" }, { type: "image_url", image_url: { url: image, detail: "low" } }] },
        { role: "assistant", content: [{ type: "text", text: "A" }] },
      ],
    },
  },
  {
    name: "function_call items join the assistant turn before them; outputs become tool messages",
    input: {
      tools: [weather],
      input: [
        { role: "user", content: "Weather in Oslo and Rome?" },
        { role: "assistant", content: [{ type: "output_text", text: "Checking." }] },
        { type: "function_call", id: "fc_1", call_id: "call_a", name: "get_weather", arguments: '{"city":"Oslo"}', status: "completed" },
        { type: "function_call", call_id: "call_b", name: "get_weather", arguments: '{"city":"Rome"}' },
        { type: "function_call_output", call_id: "call_a", output: "3C" },
        { type: "function_call_output", call_id: "call_b", output: [{ type: "input_text", text: "20C" }] },
        { type: "function_call", call_id: "call_c", name: "get_weather", arguments: "{}" },
      ],
    },
    expected: {
      tools: [chatWeather],
      messages: [
        { role: "user", content: "Weather in Oslo and Rome?" },
        {
          role: "assistant",
          content: [{ type: "text", text: "Checking." }],
          tool_calls: [
            { id: "call_a", type: "function", function: { name: "get_weather", arguments: '{"city":"Oslo"}' } },
            { id: "call_b", type: "function", function: { name: "get_weather", arguments: '{"city":"Rome"}' } },
          ],
        },
        { role: "tool", tool_call_id: "call_a", content: "3C" },
        { role: "tool", tool_call_id: "call_b", content: [{ type: "text", text: "20C" }] },
        { role: "assistant", content: null, tool_calls: [{ id: "call_c", type: "function", function: { name: "get_weather", arguments: "{}" } }] },
      ],
    },
  },
  {
    name: "reasoning items are accepted and ignored",
    input: { input: [{ type: "reasoning", id: "rs_1", summary: [], encrypted_content: "x" }, { role: "user", content: "hi" }] },
    expected: { messages: [{ role: "user", content: "hi" }] },
  },
  {
    name: "a reasoning item of this server gives its thought back to the assistant turn after it",
    input: {
      tools: [weather],
      input: [
        { role: "user", content: "Weather?" },
        { type: "reasoning", id: "rs_1", summary: [{ type: "summary_text", text: "I should call it." }], encrypted_content: encodeThought("I should call the tool.") },
        { type: "function_call", call_id: "call_a", name: "get_weather", arguments: "{}" },
        { type: "function_call_output", call_id: "call_a", output: "3C" },
      ],
    },
    expected: {
      tools: [chatWeather],
      messages: [
        { role: "user", content: "Weather?" },
        { role: "assistant", content: null, reasoning_content: "I should call the tool.", tool_calls: [{ id: "call_a", type: "function", function: { name: "get_weather", arguments: "{}" } }] },
        { role: "tool", tool_call_id: "call_a", content: "3C" },
      ],
    },
  },
  {
    name: "without encrypted_content, the summary (the thought itself here) is given back",
    input: { input: [{ role: "user", content: "Q" }, { type: "reasoning", summary: [{ type: "summary_text", text: "think" }] }, { role: "assistant", content: [{ type: "output_text", text: "A" }] }] },
    expected: { messages: [{ role: "user", content: "Q" }, { role: "assistant", content: [{ type: "text", text: "A" }], reasoning_content: "think" }] },
  },
  {
    name: "a reasoning item as clients send it back: content null, encrypted_content null, status and id",
    input: { input: [{ role: "user", content: "Q" }, { type: "reasoning", id: "rs_1", status: "completed", content: null, encrypted_content: null, summary: [] }, { role: "assistant", content: "A" }] },
    expected: { messages: [{ role: "user", content: "Q" }, { role: "assistant", content: "A" }] },
  },
  {
    name: "a thought never crosses a user turn",
    input: { input: [{ type: "reasoning", summary: [{ type: "summary_text", text: "lost" }] }, { role: "user", content: "Q" }, { role: "assistant", content: "A" }] },
    expected: { messages: [{ role: "user", content: "Q" }, { role: "assistant", content: "A" }] },
  },
  {
    name: "a namespace group offers its function tools under joined names; calls with a namespace name them",
    input: {
      tools: [
        { type: "namespace", name: "mcp__docs__", description: "Docs", tools: [{ type: "function", name: "search", parameters: { type: "object" }, defer_loading: true }] },
        { type: "namespace", name: "crm", description: "CRM", tools: [{ type: "function", name: "lookup" }] },
      ],
      tool_choice: { type: "function", name: "lookup", namespace: "crm" },
      input: [
        { role: "user", content: "find" },
        { type: "function_call", call_id: "c1", name: "search", namespace: "mcp__docs__", arguments: "{}" },
        { type: "function_call_output", call_id: "c1", output: "none" },
      ],
    },
    expected: {
      tools: [{ type: "function", function: { name: "mcp__docs__search", parameters: { type: "object" } } }, { type: "function", function: { name: "crm.lookup" } }],
      tool_choice: { type: "function", function: { name: "crm.lookup" } },
      messages: [
        { role: "user", content: "find" },
        { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "mcp__docs__search", arguments: "{}" } }] },
        { role: "tool", tool_call_id: "c1", content: "none" },
      ],
    },
  },
  {
    name: "the fields OpenAI's clients send by default are accepted; prompt_cache_key is passed on to choose the slot",
    input: { max_tool_calls: 2, include: ["reasoning.encrypted_content"], store: false, prompt_cache_key: "k", client_metadata: { originator: "codex_exec" }, safety_identifier: "u", service_tier: "auto", text: { verbosity: "low" }, reasoning: { summary: "auto" } },
    expected: { model: "chat", messages: [{ role: "user", content: "hi" }], prompt_cache_key: "k" },
  },
  { name: "flat function tools become chat tools", input: { tools: [{ type: "function", name: "f" }] }, expected: { tools: [{ type: "function", function: { name: "f" } }] } },
  { name: "tool_choice none", input: { tools: [weather], tool_choice: "none" }, expected: { tools: [chatWeather], tool_choice: "none" } },
  { name: "tool_choice required", input: { tools: [weather], tool_choice: "required" }, expected: { tools: [chatWeather], tool_choice: "required" } },
  {
    name: "tool_choice naming a function forces it",
    input: { tools: [weather], tool_choice: { type: "function", name: "get_weather" } },
    expected: { tools: [chatWeather], tool_choice: { type: "function", function: { name: "get_weather" } } },
  },
  { name: "text.format text", input: { text: { format: { type: "text" } } }, expected: { response_format: { type: "text" } } },
  { name: "text.format json_object", input: { text: { format: { type: "json_object" } } }, expected: { response_format: { type: "json_object" } } },
  { name: "text.format json_object with a schema keeps the schema", input: { text: { format: { type: "json_object", schema: { type: "object" } } } }, expected: { response_format: { type: "json_object", schema: { type: "object" } } } },
  {
    name: "text.format json_schema becomes response_format json_schema",
    input: { text: { format: { type: "json_schema", name: "mood", description: "d", schema: { type: "object" }, strict: true }, verbosity: "medium" } },
    expected: { response_format: { type: "json_schema", json_schema: { name: "mood", description: "d", schema: { type: "object" }, strict: true } } },
  },
  { name: "max_output_tokens becomes max_tokens", input: { max_output_tokens: 50 }, expected: { max_tokens: 50 } },
  { name: "reasoning effort low switches thinking off", input: { reasoning: { effort: "low" } }, expected: { chat_template_kwargs: { enable_thinking: false } } },
  { name: "reasoning effort minimal switches thinking off", input: { reasoning: { effort: "minimal" } }, expected: { chat_template_kwargs: { enable_thinking: false } } },
  { name: "reasoning effort none switches thinking off", input: { reasoning: { effort: "none" } }, expected: { chat_template_kwargs: { enable_thinking: false } } },
  { name: "reasoning effort medium leaves thinking on", input: { reasoning: { effort: "medium" } }, expected: {} },
  { name: "reasoning effort high leaves thinking on", input: { reasoning: { effort: "high", summary: null } }, expected: {} },
  { name: "temperature, top_p, parallel_tool_calls, user and stream pass through", input: { temperature: 0.5, top_p: 0.9, parallel_tool_calls: false, user: "u1", stream: true }, expected: { temperature: 0.5, top_p: 0.9, parallel_tool_calls: false, user: "u1", stream: true } },
  {
    name: "store, metadata and the off values of unsupported fields are accepted and change nothing",
    input: { store: true, metadata: { a: "b" }, background: false, truncation: "disabled", include: [], top_logprobs: 0, previous_response_id: null, conversation: null, prompt: null, max_tool_calls: null, stream: true, stream_options: { include_obfuscation: false } },
    expected: { stream: true },
  },
];

describe("to chat", () => {
  for (const c of translations) {
    test(c.name, () => {
      const { chat } = toChatRequest(req(c.input));
      expect(chat).toEqual({ model: "chat", messages: [{ role: "user", content: "hi" }], ...c.expected } as ChatRequest);
      expect(Value.Check(ChatRequest, chat)).toBe(true);
      expect(Value.Check(ResponsesRequest, req(c.input))).toBe(true);
    });
  }
});

const refusals: { name: string; input: Record<string, unknown>; param: string; says: string }[] = [
  { name: "previous_response_id", input: { previous_response_id: "resp_1" }, param: "previous_response_id", says: "not stored" },
  { name: "conversation", input: { conversation: "conv_1" }, param: "conversation", says: "not stored" },
  { name: "conversations", input: { conversations: { id: "conv_1" } }, param: "conversations", says: "not stored" },
  { name: "background mode", input: { background: true }, param: "background", says: "background mode is not supported" },
  { name: "an unknown field", input: { frobnicate: 1 }, param: "frobnicate", says: "unknown or unsupported field" },
  { name: "an unknown field even when null", input: { frobnicate: null }, param: "frobnicate", says: "unknown or unsupported field" },
  { name: "include of logprobs", input: { include: ["reasoning.encrypted_content", "message.output_text.logprobs"] }, param: "include[1]", says: "log probabilities" },
  { name: "a message with content null", input: { input: [{ role: "user", content: null }] }, param: "input[0].content", says: "required" },
  { name: "an unknown include value", input: { include: ["everything"] }, param: "include[0]", says: "not a value" },
  { name: "a damaged encrypted_content of this server", input: { input: [{ type: "reasoning", summary: [], encrypted_content: "lrs1.not base64!" }, { role: "user", content: "hi" }] }, param: "input[0].encrypted_content", says: "damaged" },
  { name: "a custom tool inside a namespace", input: { tools: [{ type: "namespace", name: "ns", tools: [{ type: "custom", name: "x" }] }] }, param: "tools[0].tools[0]", says: '"custom"' },
  { name: "a namespace without a name", input: { tools: [{ type: "namespace", tools: [] }] }, param: "tools[0].name", says: "required" },
  { name: "the same name in a namespace and outside it", input: { tools: [{ type: "function", name: "ns.f" }, { type: "namespace", name: "ns", tools: [{ type: "function", name: "f" }] }] }, param: "tools[1].tools[0].name", says: "duplicate" },
  { name: "a stored prompt", input: { prompt: { id: "pmpt_1" } }, param: "prompt", says: "prompt templates" },
  { name: "truncation auto", input: { truncation: "auto" }, param: "truncation", says: "never truncated" },
  { name: "top_logprobs", input: { top_logprobs: 3 }, param: "top_logprobs", says: "log probabilities" },
  { name: "stream_options without stream", input: { stream_options: {} }, param: "stream_options", says: "only allowed when stream is true" },
  { name: "stream obfuscation", input: { stream: true, stream_options: { include_obfuscation: true } }, param: "stream_options.include_obfuscation", says: "obfuscation" },
  ...["computer_use_preview", "local_shell", "shell", "apply_patch"].map((type) => ({
    name: `the built-in tool ${type}`,
    input: { tools: [weather, { type }] },
    param: "tools[1]",
    says: `the built-in tool "${type}" is not available`,
  })),
  { name: "a custom tool", input: { tools: [{ type: "custom", name: "x" }] }, param: "tools[0]", says: 'tools of type "custom" are not supported' },
  { name: "a function tool without a name", input: { tools: [{ type: "function" }] }, param: "tools[0].name", says: "is required" },
  { name: "an unknown field on a function tool", input: { tools: [{ ...weather, frobnicate: true }] }, param: "tools[0].frobnicate", says: "unknown" },
  { name: "an unknown tool_choice string", input: { tool_choice: "any" }, param: "tool_choice", says: "must be" },
  { name: "tool_choice required without tools", input: { tool_choice: "required" }, param: "tool_choice", says: "needs at least one" },
  { name: "tool_choice of a built-in tool", input: { tools: [weather], tool_choice: { type: "local_shell" } }, param: "tool_choice.type", says: "only a function" },
  // Spec §7: built-in tools are a 400 naming the tool; the message says how to turn it off.
  ...["web_search", "file_search", "code_interpreter", "image_generation", "mcp", "web_search_preview_2025_03_11"].map((type) => ({
    name: `the hosted tool ${type}`,
    input: { tools: [weather, { type }] },
    param: "tools[1]",
    says: `the hosted tool "${type}" does not run on this server: turn it off in the client (Codex: web_search = "disabled"`,
  })),
  { name: "tool_choice forcing a hosted tool", input: { tools: [weather], tool_choice: { type: "web_search" } }, param: "tool_choice.type", says: "cannot be forced" },
  { name: "tool_choice naming a missing function", input: { tools: [weather], tool_choice: { type: "function", name: "nope" } }, param: "tool_choice.name", says: '"nope" is not in tools' },
  { name: "an unknown text.format type", input: { text: { format: { type: "yaml" } } }, param: "text.format.type", says: "must be" },
  { name: "json_schema without a name", input: { text: { format: { type: "json_schema", schema: {} } } }, param: "text.format.name", says: "is required" },
  { name: "json_schema without a schema", input: { text: { format: { type: "json_schema", name: "n" } } }, param: "text.format.schema", says: "is required" },
  { name: "an unknown text.verbosity", input: { text: { verbosity: "terse" } }, param: "text.verbosity", says: "medium" },
  { name: "an unknown reasoning effort", input: { reasoning: { effort: "extreme" } }, param: "reasoning.effort", says: 'must be one of "none", "minimal", "low", "medium", "high", "xhigh"' },
  { name: "an unknown reasoning summary", input: { reasoning: { effort: "high", summary: "verbose" } }, param: "reasoning.summary", says: '"auto"' },
  { name: "an input item without type or role", input: { input: [{ content: "x" }] }, param: "input[0].type", says: "is required" },
  { name: "an unsupported input item type", input: { input: [{ type: "web_search_call", id: "ws_1" }] }, param: "input[0].type", says: '"web_search_call" are not supported' },
  { name: "an item reference", input: { input: [{ type: "item_reference", id: "msg_1" }] }, param: "input[0]", says: "not stored" },
  { name: "a message without content", input: { input: [{ type: "message", role: "user" }] }, param: "input[0].content", says: "is required" },
  { name: "a message without role", input: { input: [{ type: "message", content: "x" }] }, param: "input[0].role", says: "is required" },
  { name: "an unknown field on a message", input: { input: [{ role: "assistant", content: "x", phase: "final_answer" }] }, param: "input[0].phase", says: "unknown" },
  { name: "an image given by file_id", input: { input: [{ role: "user", content: [{ type: "input_image", file_id: "file-1" }] }] }, param: "input[0].content[0].file_id", says: "image_url" },
  { name: "an image without a url", input: { input: [{ role: "user", content: [{ type: "input_image" }] }] }, param: "input[0].content[0].image_url", says: "is required" },
  { name: "a file part", input: { input: [{ role: "user", content: [{ type: "input_file", file_id: "f" }] }] }, param: "input[0].content[0].type", says: '"input_file" parts are not allowed in a user message' },
  { name: "output_text in a user message", input: { input: [{ role: "user", content: [{ type: "output_text", text: "x" }] }] }, param: "input[0].content[0].type", says: "not allowed" },
  { name: "an image in a system message", input: { input: [{ role: "system", content: [{ type: "input_image", image_url: image }] }] }, param: "input[0].content[0].type", says: "not allowed in a system message" },
  { name: "a refusal part in assistant history", input: { input: [{ role: "assistant", content: [{ type: "refusal", refusal: "no" }] }] }, param: "input[0].content[0].type", says: "not allowed in an assistant message" },
  { name: "a text part without text", input: { input: [{ role: "user", content: [{ type: "input_text" }] }] }, param: "input[0].content[0].text", says: "is required" },
  { name: "function_call arguments that are not JSON", input: { input: [{ type: "function_call", call_id: "c", name: "f", arguments: "{oops" }] }, param: "input[0].arguments", says: "JSON" },
  { name: "a function_call without call_id", input: { input: [{ type: "function_call", name: "f", arguments: "{}" }] }, param: "input[0].call_id", says: "is required" },
  { name: "a function_call without name", input: { input: [{ type: "function_call", call_id: "c", arguments: "{}" }] }, param: "input[0].name", says: "is required" },
  { name: "a function_call_output answering nothing", input: { input: [{ type: "function_call_output", call_id: "c", output: "x" }] }, param: "input[0].call_id", says: "does not answer" },
  {
    name: "a second output for the same call",
    input: { input: [{ type: "function_call", call_id: "c", name: "f", arguments: "{}" }, { type: "function_call_output", call_id: "c", output: "1" }, { type: "function_call_output", call_id: "c", output: "2" }] },
    param: "input[2].call_id",
    says: "still unanswered",
  },
  {
    name: "a function_call_output without output",
    input: { input: [{ type: "function_call", call_id: "c", name: "f", arguments: "{}" }, { type: "function_call_output", call_id: "c" }] },
    param: "input[1].output",
    says: "is required",
  },
  { name: "an input with nothing to answer", input: { input: [{ type: "reasoning", summary: [] }] }, param: "input", says: "at least one message" },
];

describe("refused with a named 400", () => {
  for (const c of refusals) {
    test(`${c.name} is refused naming ${c.param}`, () => {
      let err: unknown;
      try {
        toChatRequest(req(c.input));
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(ApiError);
      const e = err as ApiError;
      expect(e.status).toBe(400);
      expect(e.code).toBe("invalid_request");
      expect(e.param).toBe(c.param);
      expect(e.message.startsWith(`${c.param}: `)).toBe(true);
      expect(e.message).toContain(c.says);
    });
  }
});

describe("echo", () => {
  test("the response repeats the request's settings, with OpenAI's defaults when absent", () => {
    expect(toChatRequest(req({})).echo).toEqual({
      instructions: null,
      max_output_tokens: null,
      parallel_tool_calls: true,
      reasoning: { effort: null, summary: null },
      store: false,
      temperature: null,
      text: { format: { type: "text" } },
      tool_choice: "auto",
      tools: [],
      top_p: null,
      user: null,
      metadata: {},
    });
  });

  test("with [compat] ignore_hosted_tools, hosted tools are accepted and not offered; function tools beside them are; forcing one is still refused", () => {
    const tools = [{ type: "web_search", external_web_access: false }, { type: "function", name: "f" }, { type: "file_search", vector_store_ids: ["vs_1"] }, { type: "code_interpreter", container: { type: "auto" } }, { type: "image_generation" }, { type: "mcp", server_label: "x" }, { type: "web_search_preview_2025_03_11" }];
    expect(toChatRequest(req({ tools, tool_choice: "auto" }), { ignoreHostedTools: true }).chat).toMatchObject({ tools: [{ type: "function", function: { name: "f" } }], tool_choice: "auto" });
    expect(() => toChatRequest(req({ tools, tool_choice: { type: "web_search" } }), { ignoreHostedTools: true })).toThrow(/^tool_choice\.type: .*cannot be forced/);
    expect(() => toChatRequest(req({ tools: [{ type: "web_search" }], tool_choice: "required" }), { ignoreHostedTools: true })).toThrow(/^tool_choice: .*needs at least one function tool/);
  });

  test("with [compat] ignore_hosted_tools, a hosted tool is repeated as sent", () => {
    const ws = { type: "web_search", external_web_access: false };
    expect(toChatRequest(req({ tools: [ws] }), { ignoreHostedTools: true }).echo.tools).toEqual([ws]);
  });

  test("given settings are repeated as sent; tools are echoed flat", () => {
    const format = { type: "json_schema", name: "n", schema: { type: "object" } };
    const { echo } = toChatRequest(
      req({ instructions: "I", max_output_tokens: 9, parallel_tool_calls: false, reasoning: { effort: "low" }, store: true, temperature: 0, text: { format, verbosity: "medium" }, tools: [{ type: "function", name: "f" }], tool_choice: "none", top_p: 0.5, user: "u", metadata: { k: "v" } }),
    );
    expect(echo).toEqual({
      instructions: "I",
      max_output_tokens: 9,
      parallel_tool_calls: false,
      reasoning: { effort: "low", summary: null },
      store: true,
      temperature: 0,
      text: { format, verbosity: "medium" } as any,
      tool_choice: "none",
      tools: [{ type: "function", name: "f", description: null, parameters: null, strict: null }],
      top_p: 0.5,
      user: "u",
      metadata: { k: "v" },
    });
  });
});

describe("errors from below name the Responses fields", () => {
  const { params } = toChatRequest(
    req({
      instructions: "I",
      tools: [weather],
      input: [
        { role: "user", content: [{ type: "input_text", text: "x" }, { type: "input_image", image_url: image }] },
        { role: "assistant", content: "a" },
        { type: "function_call", call_id: "c1", name: "get_weather", arguments: "{}" },
        { type: "function_call", call_id: "c2", name: "get_weather", arguments: "{}" },
      ],
    }),
  );
  const cases: [string, string][] = [
    ["messages[1].content[1]", "input[0].content[1]"],
    ["messages[0]", "instructions"],
    ["messages[2].tool_calls[1].function.arguments", "input[3].arguments"],
    ["messages[2].content", "input[1].content"],
    ["messages", "input"],
    ["tools[0].function.parameters.properties.s.pattern", "tools[0].parameters.properties.s.pattern"],
    ["response_format.json_schema.schema.properties.n.minimum", "text.format.schema.properties.n.minimum"],
    ["response_format", "text.format"],
    ["tool_choice.function.name", "tool_choice.name"],
    ["this model's context window is 256 tokens; the messages take 300 and max_tokens asks for 250 more", "this model's context window is 256 tokens; the messages take 300 and max_output_tokens asks for 250 more"],
  ];
  for (const [chat, responses] of cases)
    test(`${chat} reads ${responses}`, () => {
      expect(toResponsesParam(chat, params)).toBe(responses);
    });

  test("an ApiError keeps its code and headers; other errors pass through untouched", () => {
    const e = toResponsesError(new ApiError("unsupported_schema", "response_format.json_schema.schema: bad", { param: "response_format.json_schema.schema.x", headers: { a: "b" } }), params) as ApiError;
    expect([e.code, e.param, e.message, e.headers]).toEqual(["unsupported_schema", "text.format.schema.x", "text.format.schema: bad", { a: "b" }]);
    const plain = new Error("boom");
    expect(toResponsesError(plain, params)).toBe(plain);
  });
});

describe("reasoning output options", () => {
  test.each([
    { name: "nothing asked: no reasoning item", input: {}, reasoning: null },
    { name: "summary only", input: { reasoning: { summary: "auto" } }, reasoning: { summary: true, encrypted: false } },
    { name: "generate_summary (its older name)", input: { reasoning: { generate_summary: "concise" } }, reasoning: { summary: true, encrypted: false } },
    { name: "include only", input: { include: ["reasoning.encrypted_content"] }, reasoning: { summary: false, encrypted: true } },
    { name: "both (Codex)", input: { include: ["reasoning.encrypted_content"], reasoning: { effort: "medium", summary: "detailed" } }, reasoning: { summary: true, encrypted: true } },
  ])("$name", ({ input, reasoning }) => {
    const t = toChatRequest(req(input));
    expect(t.output.reasoning).toEqual(reasoning);
    expect(t.echo.reasoning.summary).toBe((input as any).reasoning?.summary ?? (input as any).reasoning?.generate_summary ?? null);
  });

  test("encrypted_content round-trips any text, and another server's content is left aside", () => {
    for (const text of ["", "plain", "ünïcødé 🧠\n<think>", "a".repeat(10_000)]) expect(decodeThought(encodeThought(text))).toBe(text);
    expect(decodeThought("gAAAAABo-openai-ciphertext")).toBeNull();
    expect(() => decodeThought("lrs1.%%%")).toThrow("damaged");
  });
});

describe("client request fixtures (test/fixtures/requests)", () => {
  const load = (name: string) => JSON.parse(require("node:fs").readFileSync(require("node:path").join(import.meta.dir, "../../fixtures/requests", name), "utf8"));
  test("a Codex-like request: every tool offered (the namespace's under its joined name), thought returned both ways", () => {
    const body = load("responses-codex.json");
    expect([...Value.Errors(ResponsesRequest, body)]).toEqual([]);
    const t = toChatRequest(body);
    expect(t.chat.tools!.map((x) => x.function.name)).toEqual(["shell", "update_plan", "mcp__docs__search"]);
    expect(t.output).toEqual({ reasoning: { summary: true, encrypted: true }, names: { mcp__docs__search: { name: "search", namespace: "mcp__docs__" } } });
    expect(t.chat.chat_template_kwargs).toBeUndefined(); // effort medium: thinking on
    expect([...Value.Errors(ChatRequest, t.chat)]).toEqual([]);
    expect(t.echo.tools[2]).toMatchObject({ type: "namespace", name: "mcp__docs__", tools: [{ type: "function", name: "search" }] });
  });
  test("Codex 0.169.0's recorded first request (test/interop/agents.test.ts): by default its web_search tool is a 400 naming it and saying how to turn it off", () => {
    const { body } = load("responses-codex-recorded.json");
    const at = body.tools.findIndex((x: any) => x.type === "web_search");
    expect(at).toBeGreaterThanOrEqual(0);
    expect(() => toChatRequest(body)).toThrow(`tools[${at}]: the hosted tool "web_search" does not run on this server: turn it off in the client (Codex: web_search = "disabled" in config.toml)`);
  });
  test("Codex 0.169.0's recorded first request with [compat] ignore_hosted_tools: every function tool offered, web_search left aside, the thought returned both ways", () => {
    const { body } = load("responses-codex-recorded.json");
    expect([...Value.Errors(ResponsesRequest, body)]).toEqual([]);
    const t = toChatRequest(body, { ignoreHostedTools: true });
    const sent = body.tools.flatMap((x: any) => (x.type === "namespace" ? x.tools.map((f: any) => namespacedName(x.name, f.name)) : x.type === "function" ? [x.name] : []));
    expect(t.chat.tools!.map((x) => x.function.name)).toEqual(sent);
    expect(sent.length).toBeGreaterThan(5);
    expect(t.echo.tools).toHaveLength(body.tools.length);
    expect(t.output.reasoning).toEqual({ summary: true, encrypted: true });
    expect([...Value.Errors(ChatRequest, t.chat)]).toEqual([]);
    expect(() => toChatJob(t.chat)).not.toThrow();
  });
  test("an AI-SDK-like request: structured output with a zod-style schema, reasoning summary and include", () => {
    const body = load("responses-ai-sdk.json");
    expect([...Value.Errors(ResponsesRequest, body)]).toEqual([]);
    const t = toChatRequest(body);
    expect(t.chat.response_format).toMatchObject({ type: "json_schema", json_schema: { name: "response", strict: false } });
    expect(t.output.reasoning).toEqual({ summary: true, encrypted: true });
    expect([...Value.Errors(ChatRequest, t.chat)]).toEqual([]);
  });
});
