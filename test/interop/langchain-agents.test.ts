import { describe, expect, test } from "bun:test";
import { ChatAnthropic } from "@langchain/anthropic";
import { AIMessage, HumanMessage, ToolMessage } from "@langchain/core/messages";
import { tool as lcTool } from "@langchain/core/tools";
import { ChatOpenAI } from "@langchain/openai";
import { Agent, OpenAIProvider, Runner, setTracingDisabled, tool as agentTool } from "@openai/agents";
import { z } from "zod";
import { useDemoServer } from "./demo-server";
import { expectAnswered, keepFixture, type RecordingProxy } from "./recording-proxy";

// LangChain (@langchain/openai, @langchain/anthropic) and the OpenAI Agents SDK, pinned and
// unmodified, against `serve --demo` over HTTP. A recording proxy in front of the server keeps
// what they send: with APPLIANCE_RECORD_FIXTURES=1 one request of each shape is written to
// test/fixtures/requests/ for test/api/client-fixtures.test.ts.

let key: string;
let proxy: RecordingProxy;
setTracingDisabled(true);
useDemoServer((s) => ({ key, proxy } = s));

const Weather = z.object({ city: z.string().max(20), celsius: z.number().int().min(-90).max(60) });
// LangChain's Anthropic model (both methods) moves what Anthropic's structured output does not take
// (maxLength, minimum, maximum, enum) into descriptions, so no server enforces them there: types only.
const WeatherLoose = z.object({ city: z.string(), celsius: z.number().int() });
const lookup = () =>
  lcTool(async ({ id }: { id: number }) => `order ${id}: shipped`, {
    name: "lookup",
    description: "Find an order",
    schema: z.object({ id: z.number().int().min(1) }),
  });

// Greedy decoding: a random-weights model's answers are then the same on every run.
const chatModels = () => ({
  // The demo model thinks before it answers: these clients switch that off with the standard reasoning fields.
  openai: new ChatOpenAI({ model: "demo-chat", apiKey: key, configuration: { baseURL: `${proxy.url}/v1` }, maxTokens: 600, maxRetries: 0, temperature: 0, modelKwargs: { reasoning_effort: "none" } }),
  "openai responses": new ChatOpenAI({ model: "demo-chat", apiKey: key, configuration: { baseURL: `${proxy.url}/v1` }, maxTokens: 600, maxRetries: 0, temperature: 0, useResponsesApi: true, modelKwargs: { reasoning: { effort: "none" } } }),
  anthropic: new ChatAnthropic({ model: "demo-chat", apiKey: key, anthropicApiUrl: proxy.url, maxTokens: 600, maxRetries: 0, temperature: 0 }),
});

// The wire format each LangChain model speaks: the fixtures' prefix.
const wire = { openai: "chat", "openai responses": "responses", anthropic: "messages" } as const;
const kebab = { jsonSchema: "json-schema", functionCalling: "function-calling" } as const;

describe.each(["openai", "openai responses", "anthropic"] as const)("LangChain %s", (which) => {
  test.each(["jsonSchema", "functionCalling"] as const)("withStructuredOutput (%s) returns what the zod schema accepts", async (method) => {
    const schema = which === "anthropic" ? WeatherLoose : Weather;
    const { result: out, sent } = await proxy.recording(() => chatModels()[which].withStructuredOutput(schema, { method }).invoke("Weather in Oslo?"));
    expect(schema.safeParse(out).success).toBe(true);
    expectAnswered(sent);
    keepFixture(`${wire[which]}-langchain-${kebab[method]}.json`, sent[0]!);
  });

  test("a tool loop: a forced call, its result sent back, an answer", async () => {
    const t = lookup();
    const model = chatModels()[which];
    const { result: first, sent: firstSent } = await proxy.recording(() => model.bindTools([t], { tool_choice: "lookup", parallel_tool_calls: false }).invoke([new HumanMessage("Where is order 5?")]));
    expectAnswered(firstSent);
    const call = (first as AIMessage).tool_calls?.[0];
    expect(call?.name).toBe("lookup");
    const result = await t.invoke(call!.args as { id: number });
    const { result: answer, sent } = await proxy.recording(() =>
      model.bindTools([t]).invoke([new HumanMessage("Where is order 5?"), first, new ToolMessage({ content: String(result), tool_call_id: call!.id! })]),
    );
    expect(answer).toBeInstanceOf(AIMessage);
    expectAnswered(sent);
    keepFixture(`${wire[which]}-langchain-tool-choice.json`, firstSent[0]!);
    keepFixture(`${wire[which]}-langchain-tools.json`, sent[0]!);
  });
});

test("an Agents SDK run with a tool and an outputType ends with an output its schema accepts", async () => {
  const runner = new Runner({ modelProvider: new OpenAIProvider({ apiKey: key, baseURL: `${proxy.url}/v1`, useResponses: true }) });
  const calls: number[] = [];
  const agent = new Agent({
    name: "orders",
    model: "demo-chat",
    instructions: "Answer with the weather.",
    modelSettings: { toolChoice: "lookup", parallelToolCalls: false, temperature: 0, maxTokens: 600, reasoning: { effort: "none" } },
    tools: [agentTool({ name: "lookup", description: "Find an order", parameters: z.object({ id: z.number().int().min(1) }), execute: async ({ id }) => (calls.push(id), `order ${id}: shipped`) })],
    outputType: Weather,
  });
  const { result, sent } = await proxy.recording(() => runner.run(agent, "Where is order 5?", { maxTurns: 4 }));
  expect(calls.length).toBeGreaterThan(0);
  expect(Weather.safeParse(result.finalOutput).success).toBe(true);
  expectAnswered(sent);
  // The last turn: the tools, the output schema and the call with its result in the input.
  keepFixture("responses-agents-sdk.json", sent.at(-1)!);
});
