import { expect, test } from "bun:test";
import { ChatAnthropic } from "@langchain/anthropic";
import { AIMessage } from "@langchain/core/messages";
import { tool } from "@langchain/core/tools";
import { createReactAgent } from "@langchain/langgraph/prebuilt";
import { ChatOpenAI } from "@langchain/openai";
import { z } from "zod";
import { useDemoServer } from "./demo-server";
import { expectAnswered, type RecordingProxy } from "./recording-proxy";

// LangGraph (@langchain/langgraph 1.7, unmodified) against `serve --demo`: its prebuilt ReAct agent
// over LangChain's OpenAI chat model (chat completions) and its Anthropic model (messages), set up
// as in langchain-agents.test.ts. The demo model has random weights: only what holds for any output
// is asserted.

let key: string;
let proxy: RecordingProxy;
useDemoServer((s) => ({ key, proxy } = s));

// The demo model thinks before it answers: reasoning_effort "none" switches that off on chat.
// Greedy decoding: a random-weights model's answers are then the same on every run.
const chatModel = (format: "chat" | "messages", maxTokens: number) =>
  format === "chat"
    ? new ChatOpenAI({ model: "demo-chat", apiKey: key, configuration: { baseURL: `${proxy.url}/v1` }, maxTokens, maxRetries: 0, temperature: 0, modelKwargs: { reasoning_effort: "none" } })
    : new ChatAnthropic({ model: "demo-chat", apiKey: key, anthropicApiUrl: proxy.url, maxTokens, maxRetries: 0, temperature: 0 });
const path = { chat: "/v1/chat/completions", messages: "/v1/messages" } as const;

test.each(["chat", "messages"] as const)("an agent without tools answers a plain prompt over %s", async (format) => {
  const agent = createReactAgent({ llm: chatModel(format, 32), tools: [] });
  const { result, sent } = await proxy.recording(() => agent.invoke({ messages: [{ role: "user", content: "Say hi." }] }));
  const last = result.messages.at(-1)!;
  expect(last).toBeInstanceOf(AIMessage);
  expect(typeof last.content === "string" || Array.isArray(last.content)).toBe(true);
  expect(sent.filter((r) => r.path.startsWith(path[format])).length).toBe(1);
  expectAnswered(sent);
}, 60_000);

test.each(["chat", "messages"] as const)("a prebuilt ReAct agent runs a tool round trip over %s", async (format) => {
  const calls: unknown[] = [];
  const lookup = tool(
    async (input) => {
      calls.push(input);
      return "found";
    },
    { name: "lookup", description: "Looks up a word", schema: z.object({ word: z.string().max(12) }) },
  );
  const toolChoice = (format === "chat" ? { type: "function", function: { name: "lookup" } } : { type: "tool", name: "lookup" }) as never;
  const agent = createReactAgent({ llm: chatModel(format, 200).bindTools([lookup], { tool_choice: toolChoice, parallel_tool_calls: false }) as never, tools: [lookup] });
  const { result, sent } = await proxy.recording(() => agent.invoke({ messages: [{ role: "user", content: "Look up 'cat'." }] }, { recursionLimit: 4 }).then((r) => r, (e) => e));
  // A forced tool every turn never ends on its own: the graph stops at its recursion limit, after the round trips.
  if (result instanceof Error) expect((result as Error).name).toBe("GraphRecursionError");
  expect(calls.length).toBeGreaterThan(0);
  for (const c of calls) expect(typeof (c as { word: unknown }).word).toBe("string");
  // The second model call carries the tool's result back.
  const model = sent.filter((r) => r.path.startsWith(path[format]));
  expect(model.length).toBeGreaterThanOrEqual(2);
  expect(JSON.stringify(model[1]!.body)).toContain(format === "chat" ? '"role":"tool"' : '"type":"tool_result"');
  expectAnswered(sent);
}, 60_000);
