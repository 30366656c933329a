import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { TSchema } from "@sinclair/typebox";
import { Value } from "@sinclair/typebox/value";
import { MessagesRequest } from "../../src/1-api/anthropic/schema";
import { toChatRequest as fromMessages } from "../../src/1-api/anthropic/to-chat";
import { ChatRequest } from "../../src/2-services/chat/request";
import { ResponsesRequest } from "../../src/1-api/responses/schema";
import { toChatRequest as fromResponses } from "../../src/1-api/responses/to-chat";
import { toChatJob } from "../../src/2-services/chat/from-request";
import type { ChatJob, ChatTurn, JsonSchema } from "../../src/3-engines/chat-job";

// The exact bodies real clients sent (test/fixtures/requests/, written by the interop tests with
// APPLIANCE_RECORD_FIXTURES=1, plus three older hand-made ones), through the translation each
// wire format takes to the chat layer (STYLE "Clients are what real apps send"). A file's prefix
// names its wire format; a recorded file is {method, path, headers, body}, an older one the bare body.

const DIR = join(import.meta.dir, "../fixtures/requests");

const FORMATS = {
  chat: { path: "/v1/chat/completions", schema: ChatRequest as TSchema, toChat: (body: any): ChatRequest => body },
  responses: { path: "/v1/responses", schema: ResponsesRequest as TSchema, toChat: (body: any, name = ""): ChatRequest => fromResponses(body, hostedToolsIgnored(name)).chat },
  messages: { path: "/v1/messages", schema: MessagesRequest as TSchema, toChat: (body: any, name = ""): ChatRequest => fromMessages(body, hostedToolsIgnored(name)).request },
};
type Format = keyof typeof FORMATS;

/**
 * Codex's default requests carry a web_search tool, which the contract refuses (spec §7; the test
 * below): their translation is checked as a server with `[compat] ignore_hosted_tools` reads them.
 */
const DEFAULT_HOSTED = /codex/;
const hostedToolsIgnored = (name: string) => ({ ignoreHostedTools: DEFAULT_HOSTED.test(name) });

const formatOf = (name: string) => name.split("-")[0] as Format;
const names = readdirSync(DIR).filter((n) => n.endsWith(".json")).sort();

function load(name: string): { path?: string; body: any } {
  const parsed = JSON.parse(readFileSync(join(DIR, name), "utf8"));
  return { path: parsed.path, body: parsed.body ?? parsed };
}

/** The fixture's chat request and the job the chat service would run. */
function translate(name: string): { body: any; chat: ChatRequest; job: ChatJob } {
  const { body } = load(name);
  const chat = FORMATS[formatOf(name)].toChat(body, name);
  return { body, chat, job: toChatJob(chat) };
}

const errors = (schema: TSchema, value: unknown) => [...Value.Errors(schema, value)].map((e) => `${e.path}: ${e.message}`);
const props = (s: JsonSchema | undefined) => (s as { properties: Record<string, unknown> }).properties;
/** The schema a structured-output request constrains the answer with: the format, or (Messages) the forced tool's. */
const answerSchema = (job: ChatJob) => (job.format?.type === "json_schema" ? job.format.schema : job.tools[0]?.parameters);

test("a fixture that carries a hosted tool is one of Codex's defaults, refused by the contract unless [compat] ignore_hosted_tools is set", () => {
  for (const name of names.filter((n) => formatOf(n) !== "chat")) {
    const { body } = load(name);
    const hosted = (body.tools ?? []).findIndex((t: any) => t.type != null && /^(web_search|file_search|code_interpreter|image_generation|mcp|web_fetch|code_execution|tool_search)/.test(t.type));
    if (hosted < 0) continue;
    expect(name).toMatch(DEFAULT_HOSTED);
    const translate = formatOf(name) === "responses" ? () => fromResponses(body) : () => fromMessages(body);
    expect(translate).toThrow(`tools[${hosted}]: `);
  }
});

test("every fixture's name starts with the wire format it was sent in", () => {
  expect(names.length).toBeGreaterThan(20);
  expect(names.filter((n) => !(formatOf(n) in FORMATS))).toEqual([]);
});

describe.each(names)("%s", (name) => {
  const format = formatOf(name);
  test("passes the format's request schema, translates, and makes a valid chat request and job", () => {
    const { path, body } = load(name);
    if (path !== undefined) expect(path.split("?")[0]).toBe(FORMATS[format].path);
    expect(errors(FORMATS[format].schema, body)).toEqual([]);
    const chat = FORMATS[format].toChat(body, name);
    expect(errors(ChatRequest, chat)).toEqual([]);
    expect(() => toChatJob(chat)).not.toThrow();
  });
});

const ALL = ["chat", "responses", "messages"] as const;
const int = (minimum: number, maximum: number) => ({ type: "integer", minimum, maximum });

describe("Vercel AI SDK", () => {
  test.each(ALL)("%s: zod's .int().min(0).max(120) reaches the structured output's schema, with thinking off", (f) => {
    const { job } = translate(`${f}-ai-sdk-object.json`);
    expect(props(answerSchema(job)).age).toEqual(int(0, 120));
    expect(job.thinking).toBe(false);
    // The Anthropic provider asks for structured output as one forced tool named json.
    if (f === "messages") expect(job).toMatchObject({ format: null, toolChoice: "required", parallelToolCalls: false, tools: [{ name: "json" }] });
    else expect(job.format).toMatchObject({ type: "json_schema", name: "response" });
  });

  test.each(ALL)("%s: zod's .email(), .url() and .regex() arrive as format and pattern, untouched", (f) => {
    const { job } = translate(`${f}-ai-sdk-pattern.json`);
    expect(props(answerSchema(job))).toMatchObject({ email: { format: "email" }, site: { format: "uri" }, code: { pattern: "^[A-Z]{3}-[0-9]{2}$" } });
  });

  test.each(ALL)("%s: a forced tool keeps zod's .int().min(1) bounds", (f) => {
    const { job } = translate(`${f}-ai-sdk-tool.json`);
    expect(job.toolChoice).toEqual({ name: "lookup" });
    expect(props(job.tools[0]!.parameters).id).toEqual(int(1, Number.MAX_SAFE_INTEGER));
  });

  test("the Responses request with include and a reasoning summary returns the thought both ways", () => {
    const body = load("responses-ai-sdk.json").body;
    expect(body).toMatchObject({ include: ["reasoning.encrypted_content"], reasoning: { summary: "auto" } });
    expect(fromResponses(body).output.reasoning).toEqual({ summary: true, encrypted: true });
  });

  test("the recorded Responses request's reasoning effort none switches thinking off", () => {
    const { body, chat } = translate("responses-ai-sdk-object.json");
    expect(body.reasoning).toEqual({ effort: "none" });
    expect(chat.chat_template_kwargs).toEqual({ enable_thinking: false });
  });
});

describe("LangChain", () => {
  test.each(["chat", "responses"] as const)("%s: withStructuredOutput jsonSchema keeps the .int() bounds in the response format", (f) => {
    const { job } = translate(`${f}-langchain-json-schema.json`);
    expect(job.format).toMatchObject({ type: "json_schema", name: "extract" });
    expect(props(answerSchema(job)).celsius).toMatchObject(int(-90, 60));
  });

  test("messages: withStructuredOutput jsonSchema (bounds moved into descriptions) is a response format", () => {
    const { job } = translate("messages-langchain-json-schema.json");
    expect(job.format?.type).toBe("json_schema");
    expect(props(answerSchema(job)).celsius).toMatchObject({ type: "integer" });
  });

  test.each(ALL)("%s: withStructuredOutput functionCalling forces the extract tool", (f) => {
    const { job } = translate(`${f}-langchain-function-calling.json`);
    expect(job.toolChoice).toEqual({ name: "extract" });
    expect(job.tools.map((t) => t.name)).toEqual(["extract"]);
    expect(props(job.tools[0]!.parameters).celsius).toMatchObject(f === "messages" ? { type: "integer" } : int(-90, 60));
  });

  test.each(ALL)("%s: bindTools with tool_choice forces the lookup tool", (f) => {
    const { job } = translate(`${f}-langchain-tool-choice.json`);
    expect(job.toolChoice).toEqual({ name: "lookup" });
    expect(props(job.tools[0]!.parameters).id).toEqual(int(1, Number.MAX_SAFE_INTEGER));
    // parallel_tool_calls: false goes out on the OpenAI formats (LangChain's Anthropic model drops it).
    if (f !== "messages") expect(job.parallelToolCalls).toBe(false);
  });

  test.each(ALL)("%s: the tool loop's second request sends the call and its result back as turns", (f) => {
    const { job } = translate(`${f}-langchain-tools.json`);
    const [call, result] = job.turns.slice(-2) as [Extract<ChatTurn, { role: "assistant" }>, Extract<ChatTurn, { role: "tool" }>];
    expect(call.role).toBe("assistant");
    expect(result).toMatchObject({ role: "tool", text: "order 4: shipped" });
    expect(call.toolCalls.map((c) => c.id)).toContain(result.toolCallId);
  });
});

test("OpenAI Agents SDK: the last turn keeps its strict tool, the output type's bounds and the call with its result", () => {
  const { job } = translate("responses-agents-sdk.json");
  expect(job.tools).toMatchObject([{ name: "lookup", strict: true }]);
  expect(job.format).toMatchObject({ type: "json_schema", name: "output" });
  expect(props(answerSchema(job)).celsius).toEqual(int(-90, 60));
  expect(job).toMatchObject({ toolChoice: "auto", parallelToolCalls: false, thinking: false });
  expect(job.turns.map((t) => t.role)).toEqual(["system", "user", "assistant", "tool"]);
});
