import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createAnthropic } from "@ai-sdk/anthropic";
import { createOpenAI } from "@ai-sdk/openai";
import { generateImage, generateText, Output, tool } from "ai";
import { z } from "zod";
import { startDemoServer } from "./demo-server";
import { expectAnswered, keepFixture, type RecordingProxy } from "./recording-proxy";

// The Vercel AI SDK (ai, @ai-sdk/openai, @ai-sdk/anthropic, pinned) and zod schemas, unmodified,
// against `serve --demo` over HTTP — the requests these clients really send. A recording proxy in
// front of the server keeps them: with APPLIANCE_RECORD_FIXTURES=1 one of each shape is written to
// test/fixtures/requests/ for test/api/client-fixtures.test.ts.

let key: string;
let proxy: RecordingProxy;
let close: () => Promise<void>;
beforeAll(async () => {
  ({ key, proxy, close } = await startDemoServer());
}, 180_000);
afterAll(() => close?.());

const openai = () => createOpenAI({ apiKey: key, baseURL: `${proxy.url}/v1` });
const anthropic = () => createAnthropic({ apiKey: key, baseURL: `${proxy.url}/v1` });
const models = () => ({
  chat: openai().chat("demo-chat"),
  responses: openai().responses("demo-chat"),
  messages: anthropic()("demo-chat"),
});

// Strings bounded: a random-weights model writes an unbounded string until max_tokens runs out.
// Greedy decoding (Anthropic's API takes no seed): zod's .max() counts UTF-16 units where JSON
// Schema's maxLength, which the grammar enforces, counts characters — a random astral character
// would fail the client's check on some runs and not others.
const Person = z.object({ name: z.string().max(20), age: z.number().int().min(0).max(120), tags: z.array(z.enum(["a", "b"])).max(3) });
// zod's .email(), .url() and .regex() send patterns with unbounded repeats (and a format beside them).
const Contact = z.object({ email: z.string().email(), site: z.string().url(), code: z.string().regex(/^[A-Z]{3}-[0-9]{2}$/) });
// The demo model thinks before it answers; the reasoning setting every client sends switches that off.
const noThinking = { openai: { reasoningEffort: "none", forceReasoning: true }, anthropic: { thinking: { type: "disabled" } } } as const;

describe.each(["chat", "responses", "messages"] as const)("%s", (format) => {
  test("generateText answers", async () => {
    const { result: r, sent } = await proxy.recording(() => generateText({ model: models()[format], prompt: "Say hi.", maxOutputTokens: 16, maxRetries: 0, temperature: 0 }));
    expect(r.finishReason).toMatch(/stop|length/);
    expect(r.usage.outputTokens).toBeGreaterThan(0);
    expectAnswered(sent);
    keepFixture(`${format}-ai-sdk-text.json`, sent[0]!);
  });

  test("structured output with zod .int(), .min(), .max() returns an object its schema accepts", async () => {
    const { result: r, sent } = await proxy.recording(() =>
      generateText({ model: models()[format], output: Output.object({ schema: Person }), prompt: "A person.", maxOutputTokens: 600, maxRetries: 0, seed: 7, temperature: 0, providerOptions: noThinking }),
    );
    expect(Person.safeParse(r.output).success).toBe(true);
    expectAnswered(sent);
    keepFixture(`${format}-ai-sdk-object.json`, sent[0]!);
  });

  test("a schema with zod .email(), .url() and .regex() is taken (enforced, not refused)", async () => {
    // A random-weights model may fill an unbounded pattern until max_tokens: a cut answer is the
    // client's NoObjectGenerated, never the server's 400.
    const { result: r, sent } = await proxy.recording(() =>
      generateText({ model: models()[format], output: Output.object({ schema: Contact }), prompt: "A contact.", maxOutputTokens: 300, maxRetries: 0, seed: 3, temperature: 0, providerOptions: noThinking }).catch((e) => e),
    );
    if (r instanceof Error) expect((r as { name: string }).name).toBe("AI_NoObjectGeneratedError");
    else expect(Contact.safeParse(r.output).success).toBe(true);
    expectAnswered(sent);
    keepFixture(`${format}-ai-sdk-pattern.json`, sent[0]!);
  });

  test("a tool whose zod schema has .int() bounds is offered and a forced call comes back", async () => {
    const { result: r, sent } = await proxy.recording(() =>
      generateText({
        model: models()[format],
        prompt: "Look up order 5.",
        maxOutputTokens: 80,
        maxRetries: 0,
        temperature: 0,
        toolChoice: { type: "tool", toolName: "lookup" },
        tools: { lookup: tool({ description: "Find an order", inputSchema: z.object({ id: z.number().int().min(1), note: z.string().optional() }) }) },
      }),
    );
    expect(r.toolCalls[0]?.toolName).toBe("lookup");
    expectAnswered(sent);
    keepFixture(`${format}-ai-sdk-tool.json`, sent[0]!);
  });
});

test("generateImage with n: 3 (three concurrent requests of one image) succeeds", async () => {
  const { result: r, sent } = await proxy.recording(() => generateImage({ model: openai().image("demo-image"), prompt: "a red boat", n: 3, size: "256x256", maxRetries: 0 }));
  expect(r.images.length).toBe(3);
  expectAnswered(sent);
});
