import { expect, test } from "bun:test";
import { compatOaiModelRef, defineCompatOpenAIModel, openAICompatible } from "@genkit-ai/compat-oai";
import { genkit, z } from "genkit";
import { useDemoServer } from "./demo-server";
import { expectAnswered, expectToolRoundTrip, type RecordingProxy } from "./recording-proxy";

// Genkit (genkit 1.42 with @genkit-ai/compat-oai 1.42, its OpenAI-compatible plugin, unmodified)
// against `serve --demo`. The plugin drops `maxOutputTokens` and `toolChoice` from its request
// builder, so `max_tokens` and `tool_choice` go through `config`, which it copies into the body as
// they are. A model it was not told about gets no response_format: structured output then is only
// asked in the prompt, so the model is declared with `output: ["json"]` and `constrained: "all"`.
// The demo model has random weights: only what holds for any output is asserted.

let key: string;
let proxy: RecordingProxy;
useDemoServer((s) => ({ key, proxy } = s));

// The demo model thinks before it answers: chat_template_kwargs switches that off.
const NO_THINKING = { chat_template_kwargs: { enable_thinking: false } };
const INFO = { supports: { multiturn: true, tools: true, toolChoice: true, systemRole: true, media: false, output: ["json", "text"], constrained: "all" } };

const app = () =>
  genkit({
    plugins: [
      openAICompatible({
        name: "appliance",
        apiKey: key,
        baseURL: `${proxy.url}/v1`,
        initializer: async (client) => [defineCompatOpenAIModel({ name: "demo-chat", client, modelRef: compatOaiModelRef({ name: "appliance/demo-chat", info: INFO as never }) })],
      }),
    ],
  });

test("generate: a plain answer, max_tokens through config", async () => {
  const { result, sent } = await proxy.recording(() => app().generate({ model: "appliance/demo-chat", prompt: "Say hi.", config: { max_tokens: 32, ...NO_THINKING } as never }));
  expect(typeof result.text).toBe("string");
  expect((sent[0]!.body as { max_tokens: number }).max_tokens).toBe(32);
  expectAnswered(sent);
}, 60_000);

test("generate with an output schema (json_schema): numbers, integers and a nested object validate, seed after seed", async () => {
  const Order = z.object({ quantity: z.number().int(), price: z.number(), rush: z.boolean(), address: z.object({ zip: z.number().int() }) });
  const ai = app();
  for (const seed of [1, 2, 3]) {
    const { result, sent } = await proxy.recording(() =>
      ai.generate({ model: "appliance/demo-chat", prompt: "Ann wants 3 lamps at 9.50 each, rush, to 0150.", output: { schema: Order }, config: { max_tokens: 300, seed, ...NO_THINKING } as never }),
    );
    expect((sent[0]!.body as { response_format: { type: string } }).response_format.type).toBe("json_schema");
    expect({ seed, output: result.output, valid: Order.safeParse(result.output).success }).toMatchObject({ valid: true });
    expectAnswered(sent);
  }
}, 60_000);

test("a tool round trip: the forced call runs the tool with object arguments and its result goes back", async () => {
  const ai = app();
  const calls: unknown[] = [];
  const lookup = ai.defineTool({ name: "lookup", description: "Looks up a word", inputSchema: z.object({ word: z.string().max(12) }), outputSchema: z.string() }, async (input) => {
    calls.push(input);
    return "found";
  });
  // Genkit's schemas allow additional properties, so a random model may write keys until
  // max_tokens, and Genkit hands a cut call's arguments to the tool as "": one call, and a seed
  // whose call ends. A forced tool every turn never ends on its own: Genkit stops at maxTurns,
  // after the round trip.
  const config = { max_tokens: 200, seed: 1, tool_choice: "required", parallel_tool_calls: false, ...NO_THINKING } as never;
  const { result, sent } = await proxy.recording(() => ai.generate({ model: "appliance/demo-chat", prompt: "Look up 'cat'.", tools: [lookup], maxTurns: 1, config }).then((r) => r, (e) => e));
  if (result instanceof Error) expect(String(result)).toContain("Exceeded maximum tool call iterations");
  expectToolRoundTrip(calls, sent);
}, 60_000);
