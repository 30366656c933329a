import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ChatAnthropic } from "@langchain/anthropic";
import { tool as langchainTool } from "@langchain/core/tools";
import { createReactAgent } from "@langchain/langgraph/prebuilt";
import { ChatOpenAI, OpenAIEmbeddings } from "@langchain/openai";
import { OpenAI as LlamaOpenAI, OpenAIEmbedding } from "@llamaindex/openai";
import { Agent } from "@mastra/core/agent";
import { compatOaiModelRef, openAICompatible } from "@genkit-ai/compat-oai";
import { genkit, z as gz } from "genkit";
import { z } from "zod";
import { startDemoServer } from "./demo-server";
import { expectAnswered, type RecordingProxy } from "./recording-proxy";

// The agent frameworks and SDK helpers people build on, at pinned versions, unmodified, against
// `serve --demo` over HTTP with the settings web/docs/clients.md gives: Mastra, LlamaIndex, Genkit,
// LangGraph, and embeddings through LlamaIndex and LangChain. Each: a plain answer and a tool or
// structured round trip, every request answered 2xx. The demo model has random weights: only what
// holds for any output is asserted (the round trip completes, arguments are objects, JSON validates).

let key: string;
let proxy: RecordingProxy;
let close: () => Promise<void>;
let v1: string;
beforeAll(async () => {
  ({ key, proxy, close } = await startDemoServer());
  v1 = `${proxy.url}/v1`;
}, 180_000);
afterAll(() => close?.());

const NO_THINKING = { chat_template_kwargs: { enable_thinking: false } };

describe("Mastra 1.71", () => {
  test("an agent answers and calls a tool (OpenAI-compatible model config: id, url, apiKey)", async () => {
    const calls: unknown[] = [];
    const { createTool } = await import("@mastra/core/tools");
    const lookup = createTool({
      id: "lookup",
      description: "Looks up a word",
      inputSchema: z.object({ word: z.string().max(12) }),
      execute: async (input) => {
        calls.push(input);
        return { found: true };
      },
    });
    const agent = new Agent({ id: "helper", name: "helper", instructions: "Be brief.", model: { id: "appliance/demo-chat", url: v1, apiKey: key }, tools: { lookup } });
    const { sent } = await proxy.recording(async () => {
      const plain = await agent.generate("Say hi.", { modelSettings: { maxOutputTokens: 16, maxRetries: 0 } });
      expect(typeof plain.text).toBe("string");
      const withTool = await agent.generate("Look up 'cat'.", { maxSteps: 2, toolChoice: { type: "tool", toolName: "lookup" }, modelSettings: { maxOutputTokens: 48, maxRetries: 0 } });
      expect(withTool.toolCalls.length).toBeGreaterThan(0);
    });
    expect(calls.length).toBeGreaterThan(0);
    expect(sent.filter((r) => r.path.startsWith("/v1/")).length).toBeGreaterThanOrEqual(2);
    expectAnswered(sent);
  }, 120_000);
});

describe("LlamaIndex 0.12", () => {
  test("OpenAI LLM: a chat answer and a forced function call with object arguments", async () => {
    const llm = new LlamaOpenAI({ model: "demo-chat", apiKey: key, baseURL: v1, maxTokens: 32, maxRetries: 0, additionalChatOptions: NO_THINKING as never });
    const { sent } = await proxy.recording(async () => {
      const r = await llm.chat({ messages: [{ role: "user", content: "Say hi." }] });
      expect(typeof r.message.content).toBe("string");
      const t = await llm.chat({
        messages: [{ role: "user", content: "Look up 'cat'." }],
        tools: [{ metadata: { name: "lookup", description: "Looks up a word", parameters: { type: "object", properties: { word: { type: "string", maxLength: 12 } }, required: ["word"] } }, call: async () => "found" }] as never,
        additionalChatOptions: { ...NO_THINKING, tool_choice: { type: "function", function: { name: "lookup" } } } as never,
      });
      const call = (t.message.options as { toolCall?: { input: unknown }[] } | undefined)?.toolCall?.[0];
      expect(call).toBeDefined();
      expect(typeof call!.input === "object" || typeof call!.input === "string").toBe(true);
    });
    expectAnswered(sent);
  }, 120_000);

  test("OpenAIEmbedding: one vector per text, of the model's dimensions", async () => {
    const embed = new OpenAIEmbedding({ model: "demo-embed", apiKey: key, baseURL: v1, maxRetries: 0 });
    const { result: vectors, sent } = await proxy.recording(() => embed.getTextEmbeddingsBatch(["a cat", "a dog"]));
    expect(vectors.length).toBe(2);
    expect(vectors[0]!.length).toBeGreaterThan(0);
    expect(vectors[1]!.length).toBe(vectors[0]!.length);
    expectAnswered(sent);
  }, 60_000);
});

describe("Genkit 1.42", () => {
  // The compat-oai plugin sends neither maxOutputTokens nor toolChoice (its request builder drops
  // both), nor a response_format for a model it did not declare: max_tokens and tool_choice go
  // through `config` as they are, and structured output is only asked in the prompt there, so
  // only the round trips are checked.
  test("generate with the OpenAI-compatible plugin: a plain answer and a tool round trip", async () => {
    const ai = genkit({ plugins: [openAICompatible({ name: "appliance", apiKey: key, baseURL: v1 })] });
    const model = compatOaiModelRef({ name: "appliance/demo-chat" });
    const calls: unknown[] = [];
    const lookup = ai.defineTool({ name: "lookup", description: "Looks up a word", inputSchema: gz.object({ word: gz.string().max(12) }), outputSchema: gz.string() }, async (input) => {
      calls.push(input);
      return "found";
    });
    const config = { max_tokens: 32, ...NO_THINKING } as never;
    const { sent } = await proxy.recording(async () => {
      const plain = await ai.generate({ model, prompt: "Say hi.", config });
      expect(typeof plain.text).toBe("string");
      // Its toolChoice is not sent either: tool_choice goes through `config` as is.
      await ai.generate({ model, prompt: "Look up 'cat'.", tools: [lookup], maxTurns: 2, config: { max_tokens: 32, tool_choice: "required", ...NO_THINKING } as never }).catch((e) => e);
    });
    expect(calls.length).toBeGreaterThan(0);
    for (const c of calls) expect(typeof (c as { word: unknown }).word).toBe("string");
    expectAnswered(sent);
    expect((sent[0]!.body as { max_tokens: number }).max_tokens).toBe(32);
  }, 120_000);
});

describe("LangGraph 1.7", () => {
  test.each(["chat", "messages"] as const)("a prebuilt ReAct agent runs a tool round trip over %s", async (format) => {
    const calls: unknown[] = [];
    const lookup = langchainTool(
      async (input) => {
        calls.push(input);
        return "found";
      },
      { name: "lookup", description: "Looks up a word", schema: z.object({ word: z.string().max(12) }) },
    );
    const llm =
      format === "chat"
        ? new ChatOpenAI({ model: "demo-chat", apiKey: key, configuration: { baseURL: v1 }, maxTokens: 48, maxRetries: 0, modelKwargs: { reasoning_effort: "none" } })
        : new ChatAnthropic({ model: "demo-chat", apiKey: key, anthropicApiUrl: proxy.url, maxTokens: 48, maxRetries: 0 });
    const toolChoice = (format === "chat" ? { type: "function", function: { name: "lookup" } } : { type: "tool", name: "lookup" }) as never;
    const agent = createReactAgent({ llm: llm.bindTools([lookup], { tool_choice: toolChoice }) as never, tools: [lookup] });
    const { result, sent } = await proxy.recording(() => agent.invoke({ messages: [{ role: "user", content: "Look up 'cat'." }] }, { recursionLimit: 4 }).then((r) => r, (e) => e));
    // A forced tool every turn never ends on its own: the graph stops at its recursion limit, after the round trips.
    if (result instanceof Error) expect((result as Error).name).toBe("GraphRecursionError");
    expect(calls.length).toBeGreaterThan(0);
    for (const c of calls) expect(typeof (c as { word: unknown }).word).toBe("string");
    expect(sent.filter((r) => r.path.startsWith("/v1/")).length).toBeGreaterThanOrEqual(2);
    expectAnswered(sent);
  }, 120_000);
});

test("LangChain OpenAIEmbeddings: documents and a query embed to vectors of one length", async () => {
  const embeddings = new OpenAIEmbeddings({ model: "demo-embed", apiKey: key, configuration: { baseURL: v1 }, maxRetries: 0 });
  const { result, sent } = await proxy.recording(async () => ({ docs: await embeddings.embedDocuments(["a cat", "a dog"]), query: await embeddings.embedQuery("pets") }));
  expect(result.docs.length).toBe(2);
  expect(result.query.length).toBe(result.docs[0]!.length);
  expectAnswered(sent);
}, 60_000);
