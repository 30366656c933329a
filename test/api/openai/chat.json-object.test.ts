import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chatTestApp } from "../../helpers/chat";
import type { TestApp } from "../../helpers/app";

// Issue 42: JSON mode and tool arguments are JSON objects, whatever schema comes beside them. The
// tiny random model writes whatever its grammar allows, so every seed that ends on its own shows
// what the grammar admits: with `response_format: {type: "json_object", schema: {}}` it wrote null,
// 0 and strings, and a tool whose parameters were `anyOf: [string, number]` was called with -96.

const SEEDS = 8;

let t: TestApp;
let key: string;
beforeAll(async () => {
  t = await chatTestApp();
  key = await t.key({ creditUsd: 50 });
});
afterAll(() => t.close());

async function post(body: Record<string, unknown>) {
  const res = await t.request("POST", "/v1/chat/completions", {
    key,
    body: { model: "chat", temperature: 1, max_tokens: 120, chat_template_kwargs: { enable_thinking: false }, messages: [{ role: "user", content: "Answer in JSON." }], ...body },
  });
  return { status: res.status, body: (await res.json()) as any };
}

const isObject = (v: unknown) => typeof v === "object" && v !== null && !Array.isArray(v);

describe("response_format json_object with a schema", () => {
  test("an empty schema still answers JSON objects only", async () => {
    let answers = 0;
    for (let seed = 1; seed <= SEEDS; seed++) {
      const r = await post({ seed, response_format: { type: "json_object", schema: {} } });
      expect(r.status).toBe(200);
      const c = r.body.choices[0];
      if (c.finish_reason !== "stop") continue;
      expect({ seed, object: isObject(JSON.parse(c.message.content)) }).toEqual({ seed, object: true });
      answers++;
    }
    expect(answers).toBeGreaterThan(0);
  }, 60_000);

  test("a keyword the grammar cannot enforce is a 400 naming response_format.schema, the field it was sent in", async () => {
    const r = await post({ response_format: { type: "json_object", schema: { type: "object", not: { required: ["x"] } } } });
    expect(r.status).toBe(400);
    expect(r.body.error).toMatchObject({ code: "unsupported_schema", param: "response_format.schema.not" });
    expect(r.body.error.message).toStartWith("response_format.schema");
  });
});

describe("tool arguments are an object whatever the top level of the parameters says", () => {
  const flat = { type: "object", properties: { n: { type: "number" } }, required: ["n"], additionalProperties: false };
  test.each([
    { name: "a union of a string, a number and an object", parameters: { anyOf: [{ type: "string" }, { type: "number" }, flat] } },
    { name: "a $ref to a union", parameters: { $ref: "#/$defs/U", $defs: { U: { oneOf: [{ type: "integer" }, flat] } } } },
    { name: "a nullable object", parameters: { ...flat, nullable: true } },
  ])("$name: every call's arguments are an object, strict and not", async ({ parameters }) => {
    let calls = 0;
    for (let seed = 1; seed <= SEEDS; seed++) {
      const strict = seed % 2 === 0;
      const r = await post({ seed, tools: [{ type: "function", function: { name: "act", parameters, strict } }], tool_choice: { type: "function", function: { name: "act" } } });
      expect(r.status).toBe(200);
      const c = r.body.choices[0];
      if (c.finish_reason !== "tool_calls") continue;
      for (const call of c.message.tool_calls) {
        expect({ seed, strict, arguments: call.function.arguments, object: isObject(JSON.parse(call.function.arguments)) }).toMatchObject({ seed, object: true });
        calls++;
      }
    }
    expect(calls).toBeGreaterThan(0);
  }, 60_000);

  test("a strict tool whose parameters admit no object is a 400 naming where", async () => {
    const r = await post({ tools: [{ type: "function", function: { name: "act", strict: true, parameters: { anyOf: [{ type: "string" }, { type: "number" }] } } }], tool_choice: "required" });
    expect(r.status).toBe(400);
    expect(r.body.error).toMatchObject({ code: "unsupported_schema", param: "tools[0].function.parameters.anyOf" });
  });
});
