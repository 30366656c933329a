import { describe, expect, test } from "bun:test";
import { Value } from "@sinclair/typebox/value";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { CountTokensRequest, MessagesRequest } from "../../../src/1-api/anthropic/schema";
import { relabel, toChatRequest, toMessagesParam } from "../../../src/1-api/anthropic/to-chat";
import type { MessagesInput } from "../../../src/1-api/anthropic/schema";
import { ApiError } from "../../../src/1-api/http/errors";
import { ChatRequest } from "../../../src/2-services/chat/request";
import { toChatJob } from "../../../src/2-services/chat/from-request";

const base = (extra: Record<string, unknown> = {}): MessagesInput =>
  ({ model: "chat", max_tokens: 64, messages: [{ role: "user", content: "hi" }], ...extra }) as MessagesInput;

const weather = { name: "get_weather", description: "Weather for a city", input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } };
const weatherChat = { type: "function", function: { name: "get_weather", description: "Weather for a city", parameters: weather.input_schema } };
const off = { enable_thinking: false };

function refusal(input: MessagesInput): ApiError {
  try {
    toChatRequest(input);
  } catch (e) {
    expect(e).toBeInstanceOf(ApiError);
    expect((e as ApiError).status).toBe(400);
    return e as ApiError;
  }
  throw new Error("expected a 400");
}

describe("translation", () => {
  test.each([
    {
      name: "a plain request keeps model, max_tokens and sampling, and turns thinking off",
      input: base({ temperature: 0.2, top_p: 0.9, top_k: 40, stop_sequences: ["END"], metadata: { user_id: "u1" } }),
      expected: { model: "chat", messages: [{ role: "user", content: [{ type: "text", text: "hi" }] }], max_tokens: 64, temperature: 0.2, top_p: 0.9, top_k: 40, stop: ["END"], chat_template_kwargs: off },
    },
    {
      name: "system string, system blocks and system messages in the list join one system prompt",
      input: base({ system: [{ type: "text", text: "a", cache_control: { type: "ephemeral" } }, { type: "text", text: "b" }], messages: [{ role: "system", content: "c" }, { role: "user", content: "hi" }] }),
      expected: {
        messages: [
          { role: "system", content: [{ type: "text", text: "a" }, { type: "text", text: "b" }, { type: "text", text: "c" }] },
          { role: "user", content: [{ type: "text", text: "hi" }] },
        ],
      },
    },
    {
      name: "images: base64 sources become data URLs, url sources stay URLs",
      input: base({
        messages: [
          {
            role: "user",
            content: [
              { type: "text", text: "compare" },
              { type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } },
              { type: "image", source: { type: "url", url: "https://example.com/a.jpg" } },
            ],
          },
        ],
      }),
      expected: {
        messages: [
          {
            role: "user",
            content: [
              { type: "text", text: "compare" },
              { type: "image_url", image_url: { url: "data:image/png;base64,iVBORw0KGgo=" } },
              { type: "image_url", image_url: { url: "https://example.com/a.jpg" } },
            ],
          },
        ],
      },
    },
    {
      name: "tool_use becomes tool_calls with JSON arguments; tool_result becomes a tool message; is_error is said in the text",
      input: base({
        tools: [weather],
        messages: [
          { role: "user", content: "weather in Oslo and Bergen?" },
          {
            role: "assistant",
            content: [
              { type: "thinking", thinking: "two calls", signature: "anything" },
              { type: "redacted_thinking", data: "opaque" },
              { type: "text", text: "Checking." },
              { type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Oslo" } },
              { type: "tool_use", id: "toolu_2", name: "get_weather", input: { city: "Bergen" }, cache_control: { type: "ephemeral" } },
            ],
          },
          {
            role: "user",
            content: [
              { type: "tool_result", tool_use_id: "toolu_1", content: [{ type: "text", text: "rain" }, { type: "text", text: "3C" }] },
              { type: "tool_result", tool_use_id: "toolu_2", content: "no such city", is_error: true },
              { type: "text", text: "and?" },
            ],
          },
        ],
      }),
      expected: {
        tools: [weatherChat],
        messages: [
          { role: "user", content: [{ type: "text", text: "weather in Oslo and Bergen?" }] },
          {
            role: "assistant",
            content: [{ type: "text", text: "Checking." }],
            reasoning_content: "two calls",
            tool_calls: [
              { id: "toolu_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Oslo"}' } },
              { id: "toolu_2", type: "function", function: { name: "get_weather", arguments: '{"city":"Bergen"}' } },
            ],
          },
          { role: "tool", tool_call_id: "toolu_1", content: "rain\n3C" },
          { role: "tool", tool_call_id: "toolu_2", content: "Error: no such city" },
          { role: "user", content: [{ type: "text", text: "and?" }] },
        ],
      },
    },
    {
      name: "an assistant turn of tool calls only has null content; a tool_result without content is empty",
      input: base({
        tools: [weather],
        messages: [
          { role: "user", content: "w" },
          { role: "assistant", content: [{ type: "tool_use", id: "t1", name: "get_weather", input: {} }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "t1" }] },
        ],
      }),
      expected: {
        messages: [
          { role: "user", content: [{ type: "text", text: "w" }] },
          { role: "assistant", content: null, tool_calls: [{ id: "t1", type: "function", function: { name: "get_weather", arguments: "{}" } }] },
          { role: "tool", tool_call_id: "t1", content: "" },
        ],
      },
    },
    {
      name: "a trailing assistant turn is kept as the start of the answer (prefill)",
      input: base({ messages: [{ role: "user", content: "hi" }, { role: "assistant", content: "Well," }] }),
      expected: { messages: [{ role: "user", content: [{ type: "text", text: "hi" }] }, { role: "assistant", content: [{ type: "text", text: "Well," }] }] },
    },
    { name: "tool_choice auto", input: base({ tools: [weather], tool_choice: { type: "auto" } }), expected: { tool_choice: "auto" } },
    { name: "tool_choice any is required", input: base({ tools: [weather], tool_choice: { type: "any" } }), expected: { tool_choice: "required" } },
    { name: "tool_choice none", input: base({ tools: [weather], tool_choice: { type: "none" } }), expected: { tool_choice: "none" } },
    {
      name: "tool_choice tool names the function; disable_parallel_tool_use turns parallel calls off",
      input: base({ tools: [weather], tool_choice: { type: "tool", name: "get_weather", disable_parallel_tool_use: true } }),
      expected: { tool_choice: { type: "function", function: { name: "get_weather" } }, parallel_tool_calls: false },
    },
    { name: "a custom tool may say type custom", input: base({ tools: [{ ...weather, type: "custom" }] }), expected: { tools: [weatherChat] } },
    { name: "thinking enabled turns reasoning on", input: base({ thinking: { type: "enabled", budget_tokens: 2048 } }), expected: { chat_template_kwargs: { enable_thinking: true } } },
    { name: "thinking adaptive turns reasoning on", input: base({ thinking: { type: "adaptive" } }), expected: { chat_template_kwargs: { enable_thinking: true } } },
    { name: "thinking disabled turns reasoning off", input: base({ thinking: { type: "disabled" } }), expected: { chat_template_kwargs: off } },
    { name: "adaptive thinking with effort low answers directly", input: base({ thinking: { type: "adaptive" }, output_config: { effort: "low" } }), expected: { chat_template_kwargs: off } },
    { name: "adaptive thinking with effort high thinks (Claude Code)", input: base({ thinking: { type: "adaptive" }, output_config: { effort: "high" } }), expected: { chat_template_kwargs: { enable_thinking: true } } },
    { name: "enabled thinking thinks whatever the effort", input: base({ thinking: { type: "enabled", budget_tokens: 1024 }, output_config: { effort: "low" } }), expected: { chat_template_kwargs: { enable_thinking: true } } },
    { name: "an effort without thinking asks for none", input: base({ output_config: { effort: "max" } }), expected: { chat_template_kwargs: off } },
    {
      name: "output_config.format json_schema becomes an enforced response_format",
      input: base({ output_config: { format: { type: "json_schema", schema: { type: "object", properties: { a: { type: "integer" } }, required: ["a"] } } } }),
      expected: { response_format: { type: "json_schema", json_schema: { name: "output", schema: { type: "object", properties: { a: { type: "integer" } }, required: ["a"] } } } },
    },
    { name: "stream asks for a stream with usage", input: base({ stream: true }), expected: { stream: true, stream_options: { include_usage: true } } },
    {
      // An unknown field is refused by name (see "refusals name the parameter"): rule 2, never dropped silently.
      name: "context_management, output_config, safeguards, cache_control and service_tier are accepted and ignored",
      input: base({ context_management: { edits: [] }, output_config: { effort: "high" }, safeguards: { x: 1 }, cache_control: { type: "ephemeral" }, service_tier: "auto" }),
      expected: { model: "chat", messages: [{ role: "user", content: [{ type: "text", text: "hi" }] }], max_tokens: 64, chat_template_kwargs: off },
    },
  ])("$name", ({ input, expected }) => {
    const { request } = toChatRequest(input);
    expect(request).toMatchObject(expected as object);
    // The translation is a valid chat request the chat layer accepts as it is.
    expect(Value.Check(ChatRequest, request)).toBe(true);
    expect(() => toChatJob(request)).not.toThrow();
  });

  test("only the ignored and the lenient fields are ignored: the full output for a bare request", () => {
    expect(toChatRequest(base()).request).toEqual({ model: "chat", messages: [{ role: "user", content: [{ type: "text", text: "hi" }] }], max_tokens: 64, chat_template_kwargs: off });
  });

  test("thinking display: shown by default, omitted on request, off when not asked", () => {
    expect(toChatRequest(base({ thinking: { type: "adaptive" } })).thinking).toBe("shown");
    expect(toChatRequest(base({ thinking: { type: "enabled", budget_tokens: 1024, display: "summarized" } })).thinking).toBe("shown");
    expect(toChatRequest(base({ thinking: { type: "adaptive", display: "omitted" } })).thinking).toBe("omitted");
    expect(toChatRequest(base()).thinking).toBe("off");
    // Claude Code 2.1.332 sends display "updates" (beta thinking-display-updates-2026-08-18): shown.
    expect(toChatRequest(base({ thinking: { type: "adaptive", display: "updates" } })).thinking).toBe("shown");
    expect(toChatRequest(base({ thinking: { type: "between_tools" } })).thinking).toBe("off");
    expect(refusal(base({ thinking: { type: "adaptive", display: "loud" } })).param).toBe("thinking.display");
    expect(refusal(base({ thinking: { type: "sometimes" } })).param).toBe("thinking.type");
  });

  // What the pinned SDK's types allow is accepted: read from its declarations, so an SDK upgrade
  // that adds a thinking type, display or effort fails here until the translator knows it.
  test("every thinking type, display and effort the Anthropic SDK's types allow is accepted", () => {
    const dts = readFileSync(join(import.meta.dir, "../../../node_modules/@anthropic-ai/sdk/resources/beta/messages/messages.d.ts"), "utf8");
    const literals = (src: string) => [...src.matchAll(/'([a-z_]+)'/g)].map((m) => m[1]!);
    const configs = [...dts.matchAll(/export interface BetaThinkingConfig\w+ \{([\s\S]*?)\n\}/g)].map((m) => m[1]!);
    const types = configs.flatMap((c) => literals(/\n    type: ([^;]+);/.exec(c)?.[1] ?? ""));
    const displays = [...new Set(configs.flatMap((c) => literals(/\n    display\?: ([^;]+);/.exec(c)?.[1] ?? "")))];
    const efforts = literals(/\n    effort\?: ([^;]+);/.exec(dts)?.[1] ?? "");
    expect(types).toEqual(expect.arrayContaining(["enabled", "adaptive", "disabled", "between_tools"]));
    expect(displays).toContain("updates");
    expect(efforts.length).toBeGreaterThan(3);
    for (const type of types) {
      const thinking = type === "enabled" ? { type, budget_tokens: 1024 } : { type };
      expect(() => toChatRequest(base({ thinking }))).not.toThrow();
      for (const display of displays) expect(() => toChatRequest(base({ thinking: { ...thinking, display } }))).not.toThrow();
    }
    for (const effort of efforts) expect(() => toChatRequest(base({ thinking: { type: "adaptive" }, output_config: { effort } }))).not.toThrow();
  });

  test("server-run tools (web search, web fetch, code execution, tool search) are a 400 naming tools[n] by default (spec §7), saying how to turn them off", () => {
    for (const type of ["web_search_20250305", "web_fetch_20250910", "code_execution_20250825", "tool_search_tool_regex_20251119"]) {
      const e = refusal(base({ tools: [weather, { type, name: "x" }] }));
      expect(e.param).toBe("tools[1]");
      expect(e.message).toContain(`the server tool "${type}" does not run on this server: turn it off in the client`);
      expect(e.message).toContain("ignore_hosted_tools");
    }
  });

  test("with [compat] ignore_hosted_tools, server-run tools are accepted and not offered", () => {
    const tools = [{ type: "web_search_20250305", name: "web_search", max_uses: 5 }, weather, { type: "web_fetch_20250910", name: "web_fetch" }, { type: "code_execution_20250825", name: "code_execution" }, { type: "tool_search_tool_regex_20251119", name: "tool_search_tool_regex" }];
    // Forcing one is refused all the same: it would never be called.
    try {
      toChatRequest(base({ tools, tool_choice: { type: "tool", name: "web_search" } }), { ignoreHostedTools: true });
      throw new Error("expected a 400");
    } catch (e) {
      expect((e as ApiError).param).toBe("tool_choice.name");
    }
    const { request } = toChatRequest(base({ tools, tool_choice: { type: "auto" } }), { ignoreHostedTools: true });
    expect(request.tools!.map((t) => t.function.name)).toEqual([weather.name]);
    expect(request.tool_choice).toBe("auto");
  });

  test("fields that change nothing in the answer are accepted: where it runs, who it is for, the off values of unsupported features", () => {
    const quiet = { service_tier: "auto", speed: "fast", inference_geo: "us", diagnostics: {}, user_profile_id: "u", workspace_id: "w", billing_policy: null, mcp_servers: [], container: null, compaction: null, fallbacks: [], context_management: { edits: [] }, safeguards: {}, cache_control: { type: "ephemeral" } };
    expect(toChatRequest(base(quiet)).request).toEqual(toChatRequest(base()).request);
  });

  test("output_format (the structured-outputs beta's name) is enforced as output_config.format is", () => {
    const schema = { type: "object", properties: { n: { type: "integer" } }, required: ["n"] };
    expect(toChatRequest(base({ output_format: { type: "json_schema", schema } })).request.response_format).toEqual(toChatRequest(base({ output_config: { format: { type: "json_schema", schema } } })).request.response_format!);
  });

  test("count_tokens bodies need no max_tokens", () => {
    const body = { model: "chat", messages: [{ role: "user", content: "hi" }], system: "be brief" };
    expect(Value.Check(CountTokensRequest, body)).toBe(true);
    expect(Value.Check(MessagesRequest, body)).toBe(false);
    expect(toChatRequest(body as MessagesInput).request.max_tokens).toBeUndefined();
  });
});

describe("refusals name the parameter", () => {
  const server = (type: string, extra: Record<string, unknown> = {}) => ({ type, name: type.split("_")[0], ...extra });
  test.each([
    { name: "a computer use tool", input: base({ tools: [server("computer_20250124", { display_width_px: 1024 })] }), param: "tools[0]" },
    { name: "a bash tool", input: base({ tools: [weather, server("bash_20250124")] }), param: "tools[1]" },
    { name: "a server-run tool, even when tool_choice forces it", input: base({ tools: [weather, server("web_search_20250305")], tool_choice: { type: "tool", name: "web" } }), param: "tools[1]" },
    { name: "a text editor tool", input: base({ tools: [server("text_editor_20250728")] }), param: "tools[0]" },
    { name: "a tool without input_schema", input: base({ tools: [{ name: "f" }] }), param: "tools[0]" },
    { name: "a tool name the chat layer cannot carry", input: base({ tools: [{ ...weather, name: "has space" }] }), param: "tools[0].name" },
    { name: "a duplicate tool name", input: base({ tools: [weather, weather] }), param: "tools[1].name" },
    { name: "MCP servers", input: base({ mcp_servers: [{ type: "url", url: "https://x", name: "x" }] }), param: "mcp_servers" },
    { name: "a container", input: base({ container: "cntr_1" }), param: "container" },
    { name: "server-side compaction", input: base({ compaction: { type: "auto" } }), param: "compaction" },
    { name: "fallback models", input: base({ fallbacks: [{ model: "other" }] }), param: "fallbacks" },
    { name: "a top-level field this server does not know", input: base({ shiny_new_feature: { on: true } }), param: "shiny_new_feature" },
    // The fuzz found a 500: the off-value table was an object, and "isPrototypeOf" found Object.prototype's.
    ...["isPrototypeOf", "__defineGetter__", "constructor", "toString", "hasOwnProperty"].map((field) => ({ name: `a field named like Object.prototype's ${field}`, input: base({ [field]: null }), param: field })),
    { name: "output_format and output_config.format both", input: base({ output_format: { type: "json_schema", schema: {} }, output_config: { format: { type: "json_schema", schema: {} } } }), param: "output_format" },
    { name: "an output_format other than json_schema", input: base({ output_format: { type: "text" } }), param: "output_format.type" },
    { name: "an unknown thinking type", input: base({ thinking: { type: "sometimes" } }), param: "thinking.type" },
    { name: "an unknown thinking display", input: base({ thinking: { type: "adaptive", display: "full" } }), param: "thinking.display" },
    { name: "an unknown effort", input: base({ output_config: { effort: "extreme" } }), param: "output_config.effort" },
    { name: "an output format other than json_schema", input: base({ output_config: { format: { type: "text" } } }), param: "output_config.format.type" },
    { name: "a json_schema output format without a schema", input: base({ output_config: { format: { type: "json_schema" } } }), param: "output_config.format.schema" },
    { name: "an unknown tool_choice type", input: base({ tools: [weather], tool_choice: { type: "required" } }), param: "tool_choice.type" },
    { name: "tool_choice any without tools", input: base({ tool_choice: { type: "any" } }), param: "tool_choice" },
    { name: "tool_choice tool without a name", input: base({ tools: [weather], tool_choice: { type: "tool" } }), param: "tool_choice.name" },
    { name: "tool_choice naming a tool not sent", input: base({ tools: [weather], tool_choice: { type: "tool", name: "nope" } }), param: "tool_choice.name" },
    { name: "a non-text system block", input: base({ system: [{ type: "image" }] }), param: "system[0].type" },
    { name: "a non-text block in a system message", input: base({ messages: [{ role: "system", content: [{ type: "image" }] }, { role: "user", content: "x" }] }), param: "messages[0].content[0].type" },
    { name: "only system messages", input: base({ messages: [{ role: "system", content: "x" }] }), param: "messages" },
    { name: "a document block", input: base({ messages: [{ role: "user", content: [{ type: "document", source: { type: "text" } }] }] }), param: "messages[0].content[0].type" },
    { name: "a text block without text", input: base({ messages: [{ role: "user", content: [{ type: "text" }] }] }), param: "messages[0].content[0].text" },
    { name: "an image without a source", input: base({ messages: [{ role: "user", content: [{ type: "image" }] }] }), param: "messages[0].content[0].source" },
    { name: "a base64 image without media_type", input: base({ messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", data: "AA" } }] }] }), param: "messages[0].content[0].source.media_type" },
    { name: "a file image source", input: base({ messages: [{ role: "user", content: [{ type: "image", source: { type: "file" } }] }] }), param: "messages[0].content[0].source.type" },
    { name: "an image in a tool_result", input: base({ messages: [{ role: "user", content: "x" }, { role: "assistant", content: [{ type: "tool_use", id: "t", name: "f", input: {} }] }, { role: "user", content: [{ type: "tool_result", tool_use_id: "t", content: [{ type: "image" }] }] }] }), param: "messages[2].content[0].content[0].type" },
    { name: "a tool_result answering no tool_use", input: base({ messages: [{ role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_x", content: "r" }] }] }), param: "messages[0].content[0].tool_use_id" },
    { name: "a tool_result answering a call twice", input: base({ messages: [{ role: "user", content: "x" }, { role: "assistant", content: [{ type: "tool_use", id: "t", name: "f", input: {} }] }, { role: "user", content: [{ type: "tool_result", tool_use_id: "t" }, { type: "tool_result", tool_use_id: "t" }] }] }), param: "messages[2].content[1].tool_use_id" },
    { name: "a tool_result without tool_use_id", input: base({ messages: [{ role: "user", content: [{ type: "tool_result" }] }] }), param: "messages[0].content[0].tool_use_id" },
    { name: "a tool_use without id", input: base({ messages: [{ role: "user", content: "x" }, { role: "assistant", content: [{ type: "tool_use", name: "f", input: {} }] }] }), param: "messages[1].content[0].id" },
    { name: "a tool_use whose input is not an object", input: base({ messages: [{ role: "user", content: "x" }, { role: "assistant", content: [{ type: "tool_use", id: "t", name: "f", input: "{}" }] }] }), param: "messages[1].content[0].input" },
    { name: "a thinking block without text", input: base({ messages: [{ role: "user", content: "x" }, { role: "assistant", content: [{ type: "thinking", signature: "s" }] }] }), param: "messages[1].content[0].thinking" },
    { name: "an image in an assistant turn", input: base({ messages: [{ role: "user", content: "x" }, { role: "assistant", content: [{ type: "image" }] }] }), param: "messages[1].content[0].type" },
    { name: "a tool_result in an assistant turn", input: base({ messages: [{ role: "user", content: "x" }, { role: "assistant", content: [{ type: "tool_result", tool_use_id: "t" }] }] }), param: "messages[1].content[0].type" },
  ])("$name → 400 naming $param", ({ input, param }) => {
    const e = refusal(input);
    expect(e.code).toBe("invalid_request");
    expect(e.param).toBe(param);
    expect(e.message.startsWith(`${param}: `)).toBe(true);
  });

  test("the server-tool refusal says what the tool is", () => {
    expect(refusal(base({ tools: [{ type: "bash_20250124", name: "bash" }] })).message).toBe(
      'tools[0]: "bash_20250124" is a server tool; only custom tools with an input_schema are supported on this server',
    );
  });
});

describe("errors from the chat layer name the Messages field", () => {
  const input = base({
    system: "sys",
    tools: [weather],
    messages: [
      { role: "user", content: "x" },
      { role: "assistant", content: [{ type: "tool_use", id: "t", name: "get_weather", input: {} }] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "t", content: "r" }, { type: "text", text: "see" }, { type: "image", source: { type: "url", url: "https://x/y.png" } }] },
    ],
  });
  const { origins } = toChatRequest(input);

  test.each([
    { chat: "messages[0]", expected: "system" },
    { chat: "messages[0].content[0]", expected: "system" },
    { chat: "messages[1].content[0]", expected: "messages[0].content" },
    { chat: "messages[3]", expected: "messages[2].content[0]" },
    { chat: "messages[4].content[1]", expected: "messages[2].content[2]" },
    { chat: "messages[4].content[1].image_url.url", expected: "messages[2].content[2].image_url.url" },
    { chat: "messages", expected: "messages" },
    { chat: "tools[0].function.parameters.properties.city.pattern", expected: "tools[0].input_schema.properties.city.pattern" },
    { chat: "tool_choice.function.name", expected: "tool_choice.name" },
    { chat: "stop", expected: "stop_sequences" },
    { chat: "max_tokens", expected: "max_tokens" },
    { chat: "response_format.json_schema.schema.properties.n.uniqueItems", expected: "output_config.format.schema.properties.n.uniqueItems" },
  ])("$chat → $expected", ({ chat, expected }) => {
    expect(toMessagesParam(chat, origins)).toBe(expected);
  });

  test("relabel rewrites the param and the message that begins with it, and keeps the code", () => {
    const e = relabel(new ApiError("invalid_request", 'messages[4].content[1]: model "chat" does not accept images', { param: "messages[4].content[1]" }), origins) as ApiError;
    expect(e.param).toBe("messages[2].content[2]");
    expect(e.message).toBe('messages[2].content[2]: model "chat" does not accept images');
    const keyword = relabel(
      new ApiError("unsupported_schema", 'tools[0].function.parameters.properties.s: the JSON Schema keyword "pattern" is not supported', { param: "tools[0].function.parameters.properties.s.pattern" }),
      origins,
    ) as ApiError;
    expect(keyword.code).toBe("unsupported_schema");
    expect(keyword.param).toBe("tools[0].input_schema.properties.s.pattern");
    expect(keyword.message).toBe('tools[0].input_schema.properties.s: the JSON Schema keyword "pattern" is not supported');
    const other = new Error("boom");
    expect(relabel(other, origins)).toBe(other);
  });

  test.each([
    {
      name: "input and max_tokens together too long: Anthropic's words, which Claude Code parses to retry with a smaller max_tokens",
      engine: "this model's context window is 4096 tokens; the messages take 3000 and max_tokens asks for 32000 more",
      anthropic: "input length and `max_tokens` exceed context limit: 3000 + 32000 > 4096, decrease input length or `max_tokens` and try again",
    },
    { name: "the prompt alone too long", engine: "this model's context window is 256 tokens; the messages take 300 and max_tokens asks for 1 more", anthropic: "prompt is too long: 300 tokens > 256 maximum" },
    { name: "the prompt fills the window", engine: "this model's context window is 256 tokens; the messages take 256, leaving no room for an answer", anthropic: "prompt is too long: 256 tokens > 255 maximum" },
  ])("context overflow: $name", ({ engine, anthropic }) => {
    const e = relabel(new ApiError("context_length_exceeded", engine, { param: "messages" }), origins) as ApiError;
    expect([e.code, e.message, e.param]).toEqual(["context_length_exceeded", anthropic, "messages"]);
  });

  test("a structured-output refusal names output_config.format", () => {
    const e = relabel(
      new ApiError("unsupported_schema", "response_format.json_schema.schema.properties.n: the JSON Schema keyword \"uniqueItems\" cannot be enforced", { param: "response_format.json_schema.schema.properties.n.uniqueItems" }),
      origins,
    ) as ApiError;
    expect(e.param).toBe("output_config.format.schema.properties.n.uniqueItems");
    expect(e.message).toBe('output_config.format.schema.properties.n: the JSON Schema keyword "uniqueItems" cannot be enforced');
  });
});

describe("client request fixtures (test/fixtures/requests)", () => {
  const load = (name: string) => JSON.parse(require("node:fs").readFileSync(require("node:path").join(import.meta.dir, "../../fixtures/requests", name), "utf8"));
  test("a Claude-Code-like request: adaptive thinking at effort high thinks, every tool offered, a valid chat request", () => {
    const body = load("messages-claude-code.json");
    const { request, thinking } = toChatRequest(body);
    expect(thinking).toBe("shown");
    expect(request.chat_template_kwargs).toEqual({ enable_thinking: true });
    expect(request.tools!.map((x) => x.function.name)).toEqual(["Bash", "TodoWrite"]);
    expect(request.max_tokens).toBe(32000);
    expect(Value.Check(ChatRequest, request)).toBe(true);
    expect(() => toChatJob(request)).not.toThrow();
  });
  test("Claude Code 2.1.332's recorded first request (test/interop/agents.test.ts): every tool offered, thinking on and not shown, a valid chat job", () => {
    const { body } = load("messages-claude-code-recorded.json");
    expect([...Value.Errors(MessagesRequest, body)]).toEqual([]);
    const { request, thinking } = toChatRequest(body);
    expect(thinking).toBe("omitted"); // display: "omitted"
    expect(request.chat_template_kwargs).toEqual({ enable_thinking: true });
    expect(request.tools!.map((x) => x.function.name)).toEqual(body.tools.map((x: { name: string }) => x.name));
    expect(Value.Check(ChatRequest, request)).toBe(true);
    expect(() => toChatJob(request)).not.toThrow();
  });
});
