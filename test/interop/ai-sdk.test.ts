import { describe, expect, test } from "bun:test";
import { createAnthropic } from "@ai-sdk/anthropic";
import { createOpenAI } from "@ai-sdk/openai";
import { createCohere } from "@ai-sdk/cohere";
import { experimental_decide as decide, generateImage, generateObject, generateText, jsonSchema, Output, rerank, streamObject, tool } from "ai";
import { z } from "zod";
import { useDemoServer } from "./demo-server";
import { expectAnswered, keepFixture, type RecordingProxy } from "./recording-proxy";

// The Vercel AI SDK (ai, @ai-sdk/openai, @ai-sdk/anthropic, pinned) and zod schemas, unmodified,
// against `serve --demo` over HTTP — the requests these clients really send. A recording proxy in
// front of the server keeps them: with APPLIANCE_RECORD_FIXTURES=1 one of each shape is written to
// test/fixtures/requests/ for test/api/client-fixtures.test.ts.

let key: string;
let proxy: RecordingProxy;
useDemoServer((s) => ({ key, proxy } = s));

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

/** streamObject's object, its stream read to the end as an app does (unread, the result never settles). */
async function streamed(opts: Parameters<typeof streamObject>[0]): Promise<unknown> {
  const s = streamObject(opts);
  try {
    for await (const _ of s.partialObjectStream) void _;
  } catch {
    // the object promise says why
  }
  return s.object.then((o) => o, (e) => e);
}

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

  // Issue 42: 13 of 48 unbounded numbers came back like 1e601694 (JSON.parse: Infinity, so zod's
  // number() fails) and an unbounded .int() as 9397587937937979 (past 2^53: zod's .int() fails).
  test("generateObject and streamObject with unbounded z.number() and z.number().int() fields: every object parses and validates, over several seeds", async () => {
    const Reading = z.object({ value: z.number(), count: z.number().int(), offsets: z.array(z.number()).max(4), nested: z.object({ scale: z.number(), step: z.number().int() }) });
    const failures: string[] = [];
    let validated = 0;
    const { sent } = await proxy.recording(async () => {
      for (const seed of [1, 2, 3, 4, 5, 6]) {
        const opts = { model: models()[format], schema: Reading, prompt: "A reading.", maxOutputTokens: 200, maxRetries: 0, seed, temperature: format === "messages" ? seed / 6 : 1, providerOptions: noThinking };
        const done = seed % 2 ? await generateObject(opts).then((r) => r.object, (e) => e) : await streamed(opts);
        // A random-weights answer cut by max_tokens is the client's NoObjectGenerated; anything else must validate.
        if (done instanceof Error) {
          if ((done as { name: string }).name !== "AI_NoObjectGeneratedError" || !/length|max/i.test(String((done as { finishReason?: string }).finishReason ?? (done as Error).message)))
            failures.push(`seed ${seed}: ${(done as Error).name}: ${(done as Error).message.slice(0, 300)} ${String((done as { text?: string }).text ?? "").slice(0, 300)}`);
        } else if (!Reading.safeParse(done).success) failures.push(`seed ${seed}: ${JSON.stringify(done).slice(0, 300)}`);
        else validated++;
      }
    });
    expect(failures).toEqual([]);
    // not only cut answers: most seeds end on their own (all six did when this was written)
    expect(validated).toBeGreaterThanOrEqual(3);
    expectAnswered(sent);
  }, 120_000);

  // Issue 42: a tool with parameters {} was called with 34452e6, 53.9, null or a string.
  test("a tool whose input schema is empty ({}) is called with an object on every seed", async () => {
    const inputs: unknown[] = [];
    // Over Responses the AI SDK sends no seed (the format has none): each try is random, and about
    // half of them spend the 200 tokens before the object closes (cut calls are not counted), so
    // it gets twelve tries rather than six (all six were cut once in the full runs of 2026-11-29).
    const seeds = format === "responses" ? [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12] : [1, 2, 3, 4, 5, 6];
    const { sent } = await proxy.recording(async () => {
      for (const seed of seeds) {
        const r = await generateText({
          model: models()[format],
          prompt: "Ping.",
          maxOutputTokens: 200,
          maxRetries: 0,
          seed,
          temperature: format === "messages" ? seed / 6 : 1,
          providerOptions: noThinking,
          toolChoice: { type: "tool", toolName: "ping" },
          tools: { ping: tool({ description: "Ping", inputSchema: jsonSchema({}) }) },
        });
        if (r.finishReason === "tool-calls") inputs.push(r.toolCalls[0]!.input);
      }
    });
    expect(inputs.length).toBeGreaterThan(0);
    for (const input of inputs) expect({ input, object: typeof input === "object" && input !== null && !Array.isArray(input) }).toMatchObject({ object: true });
    expect(JSON.stringify(sent[0]!.body)).toMatch(/"(parameters|input_schema)":\{\}/);
    expectAnswered(sent);
  }, 60_000);

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

test("decide on demo-chat and rerank on demo-rerank (the Cohere provider at /v2), over the socket", async () => {
  const { result: d, sent } = await proxy.recording(() =>
    decide({
      model: openai().decisionModel("demo-chat"),
      state: "My parcel arrived two weeks late and the box was crushed.",
      questions: { topic: { type: "choice", criteria: { delivery: "Shipping and parcels", billing: "Payments", other: null } }, upset: { type: "boolean", criteria: { true: "The customer is unhappy." } } },
      maxRetries: 0,
    }),
  );
  expect(Object.keys(d.answers.topic.probabilities!)).toEqual(["delivery", "billing", "other"]);
  expect(d.answers.upset.probability).toBeGreaterThanOrEqual(0);
  expect(d.answers.upset.probability).toBeLessThanOrEqual(1);
  expectAnswered(sent);
  const documents = ["Hold the reset button for ten seconds.", "Bananas are yellow.", "Unplug it and plug it back in."];
  const cohere = createCohere({ apiKey: key, baseURL: `${proxy.url}/v2` });
  const { result: r, sent: posted } = await proxy.recording(() => rerank({ model: cohere.reranking("demo-rerank"), query: "How do I reset my router?", documents, maxRetries: 0 }));
  expect(r.ranking.map((x) => x.originalIndex).sort()).toEqual([0, 1, 2]);
  expect(posted[0]!.path).toBe("/v2/rerank");
  expectAnswered(posted);
});
