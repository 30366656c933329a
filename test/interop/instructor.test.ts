import { expect, test } from "bun:test";
import Instructor from "@instructor-ai/instructor";
import OpenAI from "openai";
// Instructor converts schemas with zod-to-json-schema 3, which reads zod 3 schemas only (a zod 4
// schema becomes {}): its users write zod 3, here zod 4's bundled zod/v3.
import { z } from "zod/v3";
import { useDemoServer } from "./demo-server";
import { expectAnswered, keepFixture, type RecordingProxy } from "./recording-proxy";

// Instructor (@instructor-ai/instructor 1.7.0, unmodified, over the official openai client) in its
// JSON_SCHEMA mode against `serve --demo`. That mode sends `response_format: {type: "json_object",
// schema}` — issue 42: the schema was ignored, so the answer was any JSON object and the extraction
// failed validation. Now the schema is enforced (llama-server and vLLM honour it too).

let key: string;
let proxy: RecordingProxy;
useDemoServer((s) => ({ key, proxy } = s));

const Order = z.object({
  customer: z.string().max(12),
  quantity: z.number().int(),
  price: z.number(),
  rush: z.boolean(),
  address: z.object({ city: z.string().max(12), zip: z.number().int() }),
});

test("JSON_SCHEMA mode: extractions with numbers, integers and a nested object validate against the zod schema, seed after seed", async () => {
  const client = Instructor({ client: new OpenAI({ apiKey: key, baseURL: `${proxy.url}/v1`, maxRetries: 0 }), mode: "JSON_SCHEMA" });
  const { result: outcomes, sent } = await proxy.recording(async () => {
    const out: unknown[] = [];
    for (const seed of [1, 2, 3, 4]) {
      out.push(
        await client.chat.completions
          .create({
            model: "demo-chat",
            messages: [{ role: "user", content: "Extract the order: Ann wants 3 lamps at 9.50 each, rush, to Oslo 0150." }],
            response_model: { schema: Order, name: "Order" },
            max_tokens: 200,
            seed,
            max_retries: 0,
            // The demo model thinks first unless told not to (an extension llama.cpp's server shares).
            chat_template_kwargs: { enable_thinking: false },
          } as never)
          .then((r) => r, (e) => e),
      );
    }
    return out;
  });
  const requests = sent.filter((r) => r.path === "/v1/chat/completions");
  expect(requests.length).toBe(4);
  const format = (requests[0]!.body as { response_format: { type: string; schema: { properties: object } } }).response_format;
  expect(format.type).toBe("json_object");
  expect(Object.keys(format.schema.properties)).toEqual(["customer", "quantity", "price", "rush", "address"]);
  expectAnswered(sent);
  // A random-weights answer cut by max_tokens fails to parse on the client; none may fail the schema.
  const failed = outcomes.filter((o) => o instanceof Error);
  expect(failed.filter((e) => e instanceof z.ZodError).map(String)).toEqual([]);
  for (const o of outcomes) if (!(o instanceof Error)) expect(Order.safeParse(o).success).toBe(true);
  expect(failed.length).toBeLessThan(4);
  keepFixture("chat-instructor-json-schema.json", requests[0]!);
}, 120_000);
