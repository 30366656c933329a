import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chatTestApp } from "../../helpers/chat";
import type { TestApp } from "../../helpers/app";
import { checkJsonSchema } from "../../helpers/json-schema-check";
import { toFunctionParams } from "../../../src/3-engines/llama/json-schema";

// Issue 24: schemas real clients send (zod, Claude Code, pydantic) through forced tool calls and
// structured output, at temperature 1 over many seeds — the random-weights model is a fuzzer.
// No 5xx, ever; every stop / tool_calls answer parses and validates: structured output against
// the whole schema, a non-strict tool call against the part of it the call grammar enforces.

const SEEDS = Number(process.env.SCHEMA_FUZZ_SEEDS ?? 6);
const INT = { type: "integer", minimum: -9007199254740991, maximum: 9007199254740991 };

const SCHEMAS: { name: string; schema: Record<string, unknown>; output?: false }[] = [
  { name: "zod int bounds", schema: { type: "object", properties: { count: INT, small: { type: "integer", minimum: 0, maximum: 10 }, pos: { type: "integer", exclusiveMinimum: 0 } }, required: ["count", "small", "pos"], additionalProperties: false } },
  { name: "zod email, url and regex", schema: { type: "object", properties: { email: { type: "string", format: "email" }, url: { type: "string", format: "uri" }, code: { type: "string", pattern: "^[A-Z]{2}-[0-9]{3}$" } }, required: ["email", "url", "code"], additionalProperties: false } },
  { name: "untyped properties", schema: { type: "object", properties: { anything: {}, note: { description: "free" } }, required: ["anything"] } },
  { name: "Claude-Code-like tool", output: false, schema: { $schema: "http://json-schema.org/draft-07/schema#", type: "object", properties: { command: { type: "string" }, timeout_ms: { type: "number", minimum: 0, maximum: 600000 }, run_in_background: { type: "boolean" } }, required: ["command"], additionalProperties: false, defer_loading: true } },
  { name: "maxLength strings", schema: { type: "object", properties: { title: { type: "string", maxLength: 20 }, tag: { type: "string", minLength: 1, maxLength: 3 } }, required: ["title", "tag"] } },
  { name: "nested anyOf, allOf and $ref", schema: { type: "object", properties: { item: { $ref: "#/$defs/Item" }, either: { anyOf: [{ type: "integer", minimum: 1, maximum: 5 }, { type: "string", format: "date" }] }, both: { allOf: [{ type: "object", properties: { id: { type: "string", format: "uuid" } }, required: ["id"] }] } }, required: ["item", "either", "both"], $defs: { Item: { type: "object", properties: { n: { type: "integer", minimum: 0 }, ip: { type: "string", format: "ipv4" } }, required: ["n"] } } } },
  { name: "nullable", schema: { type: "object", properties: { a: { type: ["integer", "null"] }, b: { type: "string", nullable: true }, when: { type: "string", format: "date-time" } }, required: ["a", "b"] } },
];

let t: TestApp & { openai: (key: string) => OpenAI };
let key: string;
type OpenAI = import("openai").default;
beforeAll(async () => {
  t = await chatTestApp();
  key = await t.key({ creditUsd: 50 });
});
afterAll(() => t.close());

async function post(body: Record<string, unknown>) {
  const res = await t.request("POST", "/v1/chat/completions", { key, body: { model: "chat", temperature: 1, ...body } });
  return { status: res.status, body: (await res.json()) as any };
}

describe("forced tool calls with the schemas clients send", () => {
  test.each(SCHEMAS)("$name: no 5xx and every tool call validates", async ({ schema }) => {
    const tools = [{ type: "function", function: { name: "act", parameters: schema } }];
    const enforced = toFunctionParams(schema as any) ?? {};
    let calls = 0;
    for (let seed = 1; seed <= SEEDS; seed++) {
      const r = await post({ tools, tool_choice: { type: "function", function: { name: "act" } }, parallel_tool_calls: false, seed, max_tokens: 240, messages: [{ role: "user", content: "Go." }] });
      expect(r.status).toBe(200);
      const choice = r.body.choices[0];
      if (process.env.SCHEMA_FUZZ_LOG) console.log(schema === SCHEMAS[0]!.schema ? "" : "", choice.finish_reason, JSON.stringify(choice.message.tool_calls?.[0]?.function.arguments ?? choice.message.content).slice(0, 200));
      if (choice.finish_reason !== "tool_calls") continue;
      for (const c of choice.message.tool_calls) {
        const args = JSON.parse(c.function.arguments);
        expect({ seed, error: checkJsonSchema(args, enforced) }).toEqual({ seed, error: null });
        calls++;
      }
    }
    expect(calls).toBeGreaterThan(0);
  }, 60_000);
});

test("a non-strict tool whose schema no grammar can express is offered, not refused", async () => {
  const parameters = { type: "object", properties: { tags: { type: "array", items: { type: "string" }, uniqueItems: true }, x: { not: { type: "null" } } }, if: { required: ["x"] }, then: { required: ["tags"] } };
  const r = await post({ tools: [{ type: "function", function: { name: "act", parameters } }], tool_choice: { type: "function", function: { name: "act" } }, seed: 1, max_tokens: 120, messages: [{ role: "user", content: "Go." }] });
  expect(r.status).toBe(200);
  expect(["tool_calls", "length"]).toContain(r.body.choices[0].finish_reason);
});

describe("forced strict tool calls are enforced like structured output", () => {
  test.each(SCHEMAS.filter((s) => s.output !== false))("$name: no 5xx and every tool call validates against the whole schema", async ({ schema }) => {
    const tools = [{ type: "function", function: { name: "act", strict: true, parameters: schema } }];
    let calls = 0;
    for (let seed = 1; seed <= SEEDS; seed++) {
      const r = await post({ tools, tool_choice: { type: "function", function: { name: "act" } }, parallel_tool_calls: false, seed, max_tokens: 240, messages: [{ role: "user", content: "Go." }] });
      expect(r.status).toBe(200);
      const choice = r.body.choices[0];
      if (choice.finish_reason !== "tool_calls") continue;
      for (const c of choice.message.tool_calls) {
        expect({ seed, error: checkJsonSchema(JSON.parse(c.function.arguments), schema) }).toEqual({ seed, error: null });
        calls++;
      }
    }
    expect(calls).toBeGreaterThan(0);
  }, 60_000);
});

describe("structured output with the schemas clients send", () => {
  test.each(SCHEMAS.filter((s) => s.output !== false))("$name: no 5xx and every stop answer validates, thinking on and off", async ({ schema }) => {
    for (let seed = 1; seed <= SEEDS; seed++) {
      const thinking = seed % 2 === 0;
      const r = await post({
        seed,
        max_tokens: 240,
        response_format: { type: "json_schema", json_schema: { name: "out", schema } },
        chat_template_kwargs: { enable_thinking: thinking },
        messages: [{ role: "user", content: "Answer in JSON." }],
      });
      expect(r.status).toBe(200);
      const choice = r.body.choices[0];
      if (process.env.SCHEMA_FUZZ_LOG) console.log(thinking, choice.finish_reason, JSON.stringify(choice.message.content).slice(0, 200));
      if (choice.finish_reason !== "stop") {
        expect(choice.finish_reason).toBe("length");
        continue;
      }
      const answer = JSON.parse(choice.message.content);
      expect({ seed, error: checkJsonSchema(answer, schema) }).toEqual({ seed, error: null });
    }
  }, 60_000);

  test("after thinking the answer is never empty: stop only with JSON that validates, else length", async () => {
    const schema = { type: "object", properties: { n: { type: "integer", minimum: -50, maximum: 500 } }, required: ["n"] };
    const finishes: string[] = [];
    for (let seed = 1; seed <= 14; seed++) {
      const r = await post({ seed, max_tokens: 300, response_format: { type: "json_schema", json_schema: { name: "out", schema } }, messages: [{ role: "user", content: "Answer in JSON." }] });
      expect(r.status).toBe(200);
      const choice = r.body.choices[0];
      finishes.push(choice.finish_reason);
      expect(r.body.usage.completion_tokens_details.reasoning_tokens).toBeGreaterThan(0);
      if (choice.finish_reason === "stop") expect({ seed, error: checkJsonSchema(JSON.parse(choice.message.content), schema) }).toEqual({ seed, error: null });
      else expect(choice.finish_reason).toBe("length");
    }
    // The random model ends some thoughts with end-of-generation: those are answered, not empty.
    expect(finishes).toContain("stop");
  }, 60_000);
});
