import { expect, test } from "bun:test";
import { OpenAI, OpenAIEmbedding } from "@llamaindex/openai";
import { tool } from "llamaindex";
import { z } from "zod";
import { useDemoServer } from "./demo-server";
import { expectAnswered, type RecordingProxy } from "./recording-proxy";

// LlamaIndex.TS (llamaindex 0.12 with @llamaindex/openai 0.4, unmodified) against `serve --demo`:
// its OpenAI LLM and OpenAIEmbedding pointed at the server with `baseURL`. The demo model has
// random weights: only what holds for any output is asserted.

let key: string;
let proxy: RecordingProxy;
useDemoServer((s) => ({ key, proxy } = s));

// The demo model thinks before it answers: chat_template_kwargs (llama.cpp's server's extension)
// switches that off; additionalChatOptions goes into the request body as it is.
const llm = (maxTokens: number, extra: object = {}) =>
  new OpenAI({ model: "demo-chat", apiKey: key, baseURL: `${proxy.url}/v1`, maxTokens, maxRetries: 0, additionalChatOptions: { chat_template_kwargs: { enable_thinking: false }, ...extra } as never });

test("chat: a plain answer", async () => {
  const { result, sent } = await proxy.recording(() => llm(32).chat({ messages: [{ role: "user", content: "Say hi." }] }));
  expect(typeof result.message.content).toBe("string");
  expectAnswered(sent);
}, 60_000);

test("chat with a zod responseFormat (strict json_schema): numbers, integers and a nested object validate, seed after seed", async () => {
  const Order = z.object({ quantity: z.number().int(), price: z.number(), rush: z.boolean(), address: z.object({ zip: z.number().int() }) });
  for (const seed of [1, 2, 3]) {
    const { result, sent } = await proxy.recording(() =>
      llm(300, { seed }).chat({ messages: [{ role: "user", content: "Ann wants 3 lamps at 9.50 each, rush, to 0150." }], responseFormat: Order as never }),
    );
    expect((sent[0]!.body as { response_format: { type: string } }).response_format.type).toBe("json_schema");
    const content = result.message.content as string;
    expect({ seed, content, valid: Order.safeParse(JSON.parse(content)).success }).toMatchObject({ valid: true });
    expectAnswered(sent);
  }
}, 60_000);

test("exec: a forced tool call runs the tool with object arguments and yields its result message", async () => {
  const calls: unknown[] = [];
  const lookup = tool({
    name: "lookup",
    description: "Looks up a word",
    parameters: z.object({ word: z.string().max(12) }),
    execute: (input) => {
      calls.push(input);
      return "found";
    },
  });
  // One call: a random model asked for "required" tools may otherwise write calls until max_tokens.
  const { result, sent } = await proxy.recording(() =>
    llm(200, { tool_choice: "required", parallel_tool_calls: false }).exec({ messages: [{ role: "user", content: "Look up 'cat'." }], tools: [lookup] }),
  );
  expect(result.toolCalls.length).toBe(1);
  expect(calls.length).toBe(1);
  expect(typeof (calls[0] as { word: unknown }).word).toBe("string");
  expect(result.newMessages.map((m) => m.role)).toEqual(["assistant", "user"]);
  expect(result.newMessages[1]!.options).toMatchObject({ toolResult: { isError: false } });
  expectAnswered(sent);
}, 60_000);

test("OpenAIEmbedding: one vector per text, all of one length", async () => {
  const embed = new OpenAIEmbedding({ model: "demo-embed", apiKey: key, baseURL: `${proxy.url}/v1`, maxRetries: 0 });
  const { result, sent } = await proxy.recording(async () => ({ docs: await embed.getTextEmbeddingsBatch(["a cat", "a dog"]), query: await embed.getQueryEmbedding({ type: "text", text: "pets" } as never) }));
  expect(result.docs.length).toBe(2);
  expect(result.docs[0]!.length).toBeGreaterThan(0);
  expect(result.docs[1]!.length).toBe(result.docs[0]!.length);
  expect(result.query!.length).toBe(result.docs[0]!.length);
  for (const v of [...result.docs, result.query!]) expect(v.every(Number.isFinite)).toBe(true);
  expectAnswered(sent);
}, 60_000);
