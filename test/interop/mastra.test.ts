import { expect, test } from "bun:test";
import { Agent } from "@mastra/core/agent";
import { createTool } from "@mastra/core/tools";
import { z } from "zod";
import { useDemoServer } from "./demo-server";
import { expectAnswered, expectToolRoundTrip, type RecordingProxy } from "./recording-proxy";

// Mastra (@mastra/core 1.71, unmodified) against `serve --demo`, configured as its docs say for an
// OpenAI-compatible server: `model: { id: "<provider>/<model>", url, apiKey }` (it then speaks chat
// completions through the AI SDK's openai-compatible provider, named after <provider>). The demo
// model has random weights: only what holds for any output is asserted.

let key: string;
let proxy: RecordingProxy;
useDemoServer((s) => ({ key, proxy } = s));

const model = () => ({ id: "appliance/demo-chat" as const, url: `${proxy.url}/v1`, apiKey: key });
// The demo model thinks before it answers; the standard field switches that off. Options keyed by
// the provider's name (the id's prefix) go into the request body.
const settings = (maxOutputTokens: number, seed = 1) => ({
  modelSettings: { maxOutputTokens, maxRetries: 0, seed },
  providerOptions: { appliance: { reasoningEffort: "none" } },
});

test("an agent answers a plain prompt", async () => {
  const agent = new Agent({ id: "helper", name: "helper", instructions: "Be brief.", model: model() });
  const { result, sent } = await proxy.recording(() => agent.generate("Say hi.", settings(16)));
  expect(typeof result.text).toBe("string");
  expect((sent[0]!.body as { reasoning_effort?: string }).reasoning_effort).toBe("none");
  expectAnswered(sent);
}, 60_000);

test("structuredOutput with numbers, integers and a nested object validates against its zod schema, seed after seed", async () => {
  const Order = z.object({ quantity: z.number().int(), price: z.number(), rush: z.boolean(), address: z.object({ zip: z.number().int() }) });
  const agent = new Agent({ id: "extractor", name: "extractor", instructions: "Extract the order.", model: model() });
  for (const seed of [1, 2, 3]) {
    const { result, sent } = await proxy.recording(() => agent.generate("Ann wants 3 lamps at 9.50 each, rush, to 0150.", { ...settings(300, seed), structuredOutput: { schema: Order } }));
    expect((sent[0]!.body as { response_format?: { type: string } }).response_format?.type).toBe("json_schema");
    expect({ seed, object: result.object, valid: Order.safeParse(result.object).success }).toMatchObject({ valid: true });
    expectAnswered(sent);
  }
}, 60_000);

test("a tool round trip: the forced call runs the tool with object arguments and its result goes back", async () => {
  const calls: unknown[] = [];
  const lookup = createTool({
    id: "lookup",
    description: "Looks up a word",
    inputSchema: z.object({ word: z.string().max(12) }),
    execute: async (input) => {
      calls.push(input);
      return { found: true };
    },
  });
  const agent = new Agent({ id: "helper", name: "helper", instructions: "Be brief.", model: model(), tools: { lookup } });
  const { sent } = await proxy.recording(() => agent.generate("Look up 'cat'.", { ...settings(200), maxSteps: 2, toolChoice: { type: "tool", toolName: "lookup" } }));
  expectToolRoundTrip(calls, sent);
}, 60_000);
