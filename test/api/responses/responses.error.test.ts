import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import OpenAI from "openai";
import { ApiError } from "../../../src/1-api/http/errors";
import type { ChatRun, ChatService } from "../../../src/2-services/chat/service";
import { testApp, type TestApp } from "../../helpers/app";
import { chatTestApp } from "../../helpers/chat";
import { checkStream, parseSse } from "./invariants";

// Named 400s through the official client, the routes that would need a store, and failures
// before and during a stream.

setDefaultTimeout(30_000); // model calls share two cores with whatever else runs

let t: TestApp & { openai: (key: string) => OpenAI };
let client: OpenAI;
let key: string;
beforeAll(async () => {
  t = await chatTestApp();
  key = await t.key({ creditUsd: 5 });
  client = t.openai(key);
});
afterAll(() => t.close());

async function refusal(params: Record<string, unknown>) {
  const err = await client.responses.create({ model: "chat", input: "hi", max_output_tokens: 2, ...params } as any).catch((e) => e);
  expect(err).toBeInstanceOf(OpenAI.APIError);
  return err as InstanceType<typeof OpenAI.APIError>;
}

describe("named 400s", () => {
  const table: [string, Record<string, unknown>, string, string][] = [
    ["previous_response_id", { previous_response_id: "resp_abc" }, "previous_response_id", "not stored"],
    ["conversation", { conversation: "conv_abc" }, "conversation", "not stored"],
    ["a client-run built-in tool", { tools: [{ type: "local_shell" }] }, "tools[0]", '"local_shell"'],
    ["background mode", { background: true }, "background", "background mode"],
    ["an unknown field", { frobnicate: "k" }, "frobnicate", "unsupported"],
    ["truncation auto", { truncation: "auto" }, "truncation", "disabled"],
    ["an image by file id", { input: [{ role: "user", content: [{ type: "input_image", file_id: "file-1" }] }] }, "input[0].content[0].file_id", "image_url"],
  ];
  for (const [name, params, param, says] of table)
    test(`${name} is a BadRequestError naming ${param}`, async () => {
      const err = await refusal(params);
      expect(err).toBeInstanceOf(OpenAI.BadRequestError);
      expect(err.param).toBe(param);
      expect(err.type).toBe("invalid_request_error");
      expect(err.message).toContain(says);
    });

  test("bad bodies are 400 naming the field", async () => {
    for (const [body, param] of [
      [{ model: "chat" }, "input"],
      [{ model: "chat", input: [{ role: "robot", content: "x" }] }, "input[0].role"],
      [{ model: "chat", input: [{ role: "user", content: [{ type: 5 }] }] }, "input[0].content[0].type"],
      [{ model: "chat", input: 7 }, "input"],
      [{ model: "chat", input: "x", temperature: 9 }, "temperature"],
      [{ model: "chat", input: "x", reasoning: { effort: "extreme" } }, "reasoning.effort"],
      [{ model: "chat", input: "x", max_output_tokens: 0 }, "max_output_tokens"],
      [{ model: "chat", input: "x", stream: "yes" }, "stream"],
      [{ model: "chat", input: [{ type: "function_call", call_id: "c", name: "f", arguments: { a: 1 } }] }, "input[0].arguments"],
    ] as const) {
      const res = await t.request("POST", "/v1/responses", { key, body });
      expect(res.status).toBe(400);
      const e = (await res.json()).error;
      expect(e.type).toBe("invalid_request_error");
      expect(e.param).toBe(param);
    }
  });

  test("errors from the model name the Responses fields, not chat-completions ones", async () => {
    const image = await refusal({ input: [{ role: "user", content: [{ type: "input_text", text: "what is it" }, { type: "input_image", image_url: "data:image/png;base64,iVBORw0KGgo=" }] }] });
    expect([image.status, image.param]).toEqual([400, "input[0].content[1]"]);
    expect(image.message).toContain('model "chat" does not accept images');

    const context = await refusal({ model: "tight", max_output_tokens: 250, input: "a few words here" });
    expect([context.code, context.param]).toEqual(["context_length_exceeded", "input"]);
    expect(context.message).toContain("max_output_tokens asks for 250");

    const schema = await refusal({ text: { format: { type: "json_schema", name: "n", schema: { type: "object", properties: { n: { type: "array", uniqueItems: true } } } } } });
    expect([schema.code, schema.param]).toEqual(["unsupported_schema", "text.format.schema.properties.n.uniqueItems"]);
    expect(schema.message).toContain("text.format.schema.properties.n: the JSON Schema keyword");

    const tool = await refusal({ tools: [{ type: "function", name: "f", strict: true, parameters: { type: "object", properties: { s: { type: "array", uniqueItems: true } } } }] });
    expect(tool.param).toBe("tools[0].parameters.properties.s.uniqueItems");

    const both = await refusal({ tools: [{ type: "function", name: "f" }], text: { format: { type: "json_schema", name: "n", schema: { type: "array", uniqueItems: true } } } });
    expect(both.param).toBe("text.format.schema.uniqueItems");
    expect(both.message).not.toContain("response_format");
  });

  test("an unknown model is 404 model not found", async () => {
    const err = await refusal({ model: "gpt-nope" });
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect(err.code).toBe("model_not_found");
  });
});

describe("nothing is stored", () => {
  test("retrieving, deleting, cancelling or listing a response is 404 saying responses are not stored", async () => {
    const calls = [
      () => client.responses.retrieve("resp_abc"),
      () => client.responses.delete("resp_abc"),
      () => client.responses.cancel("resp_abc"),
      () => client.responses.inputItems.list("resp_abc"),
    ];
    for (const call of calls) {
      const err: any = await (call() as Promise<unknown>).catch((e) => e);
      expect(err).toBeInstanceOf(OpenAI.NotFoundError);
      expect(err.code).toBe("not_found");
      expect(err.message).toContain("resp_abc");
      expect(err.message).toContain("does not store responses");
    }
  });

  test("a response id from this server is not retrievable either", async () => {
    const r = await client.responses.create({ model: "chat", input: "hi", max_output_tokens: 1, reasoning: { effort: "low" } });
    const res = await t.request("GET", `/v1/responses/${r.id}`, { key });
    expect(res.status).toBe(404);
    expect((await res.json()).error).toMatchObject({ type: "invalid_request_error", code: "not_found", param: null });
  });
});

describe("failures around a stream", () => {
  const chunk = (delta: object) => ({ id: "chatcmpl-x", object: "chat.completion.chunk", created: 1, model: "chat", choices: [{ index: 0, delta, finish_reason: null }] });
  /** A chat service whose generation fails after two words. */
  function failing(error: unknown): ChatService {
    const run = (): ChatRun =>
      ({
        ids: { id: "chatcmpl-x", created: 1, model: "chat", toolCallId: (i: number) => `call_${i}` },
        promptTokens: 3,
        cachedTokens: 0,
        stopSequence: () => null,
        chunks: (async function* () {
          yield chunk({ role: "assistant", content: "" }) as any;
          yield chunk({ content: "Hello" }) as any;
          yield chunk({ content: " there" }) as any;
          throw error;
        })(),
      }) as ChatRun;
    return { start: async () => run(), complete: async () => run(), countTokens: async () => 3 } as unknown as ChatService;
  }

  async function stream(error: unknown) {
    const f = testApp({ override: () => ({ chat: failing(error) }) });
    try {
      const res = await f.request("POST", "/v1/responses", { key: await f.key({ creditUsd: 1 }), body: { model: "chat", input: "hi", stream: true } });
      expect(res.status).toBe(200);
      return { events: parseSse(await res.text()), logs: f.logs, json: null };
    } finally {
      await f.close();
    }
  }

  test("an unexpected failure mid-stream is an error event naming only the request id, logged, then the end", async () => {
    const { events, logs } = await stream(new Error("engine crashed"));
    const { terminal, items } = checkStream(events);
    expect(items).toEqual([]); // the message was cut, never finished
    expect(terminal).toEqual({ type: "error", sequence_number: events.length - 1, code: "internal_error", message: expect.stringMatching(/^internal server error \(request id req_/), param: null });
    expect(events.filter((e) => e.type === "response.output_text.delta").map((e) => e.delta).join("")).toBe("Hello there");
    expect(logs.some((l) => l.msg === "responses stream failed" && l.error === "engine crashed")).toBe(true);
  });

  test("an API error mid-stream keeps its code in the error event", async () => {
    const { events } = await stream(new ApiError("model_unavailable", "the worker went away"));
    expect(events.at(-1)).toMatchObject({ type: "error", code: "model_unavailable", message: "the worker went away", param: null });
  });

  test("a failure during a non-streamed answer is a plain error response", async () => {
    const f = testApp({ override: () => ({ chat: failing(new ApiError("model_unavailable", "the worker went away")) }) });
    try {
      const res = await f.request("POST", "/v1/responses", { key: await f.key({ creditUsd: 1 }), body: { model: "chat", input: "hi" } });
      expect(res.status).toBe(503);
      expect((await res.json()).error).toMatchObject({ code: "model_unavailable", message: "the worker went away" });
    } finally {
      await f.close();
    }
  });
});
