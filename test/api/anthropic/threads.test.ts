import { describe, expect, test } from "bun:test";
import { Value } from "@sinclair/typebox/value";
import { MessagesRequest } from "../../../src/1-api/anthropic/schema";
import { continueRequest, fingerprintMismatch, parseThread, relabelContinued, threadErrors, type HeldThread } from "../../../src/1-api/anthropic/threads";
import { toChatRequest } from "../../../src/1-api/anthropic/to-chat";
import type { MessagesInput } from "../../../src/1-api/anthropic/schema";
import { ApiError, toAnthropicErrorBody } from "../../../src/1-api/http/errors";
import { AnthropicErrorBody } from "../../../src/1-api/openapi/hand-schemas";

// The pure part of message threads: what the field means, the fingerprint a continue must keep,
// the request a continue is answered as, and errors named as the client sent its request.

const tools = [{ name: "lookup", input_schema: { type: "object", properties: { word: { type: "string" } } } }];
const held: HeldThread = {
  model: "chat",
  system: "Be brief.",
  tools,
  messages: [
    { role: "user", content: "Look up cat." },
    { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "lookup", input: { word: "cat" } }] },
  ],
};
const req = (extra: Record<string, unknown> = {}): MessagesInput =>
  ({ model: "chat", max_tokens: 16, messages: [{ role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "found" }] }], ...extra }) as MessagesInput;

function thrown(f: () => unknown): ApiError {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(ApiError);
    return e as ApiError;
  }
  throw new Error("expected an error");
}

describe("the thread field", () => {
  test.each([
    { name: "absent", input: undefined, expected: null },
    { name: "null", input: null, expected: null },
    { name: "create", input: { type: "create" }, expected: { type: "create" } },
    { name: "continue", input: { type: "continue", previous_message_id: "msg_1" }, expected: { type: "continue", previousMessageId: "msg_1" } },
  ])("$name", ({ input, expected }) => {
    expect(parseThread(input as never)).toEqual(expected as never);
  });

  test.each([
    { name: "an unknown type", input: { type: "fork" }, param: "thread.type" },
    { name: "a continue without the id", input: { type: "continue" }, param: "thread.previous_message_id" },
    { name: "a create with an id", input: { type: "create", previous_message_id: "msg_1" }, param: "thread.previous_message_id" },
  ])("$name is a 400 naming $param", ({ input, param }) => {
    const e = thrown(() => parseThread(input));
    expect([e.code, e.param]).toEqual(["invalid_request", param]);
  });

  test("the request schema accepts the SDK's two shapes", () => {
    for (const thread of [{ type: "create" }, { type: "continue", previous_message_id: "msg_1" }])
      expect(Value.Check(MessagesRequest, { model: "m", max_tokens: 1, messages: [{ role: "user", content: "x" }], thread })).toBe(true);
  });

  test("the translator refuses a thread it was handed unresolved, with the code the SDK recovers from", () => {
    const e = thrown(() => toChatRequest(req({ thread: { type: "create" } })));
    expect(toAnthropicErrorBody(e).error).toMatchObject({ type: "invalid_request_error", details: { error_code: "thread_unsupported_request" } });
  });
});

describe("the fingerprint", () => {
  test.each([
    { name: "the SDK's continue (model only)", extra: {}, expected: [] },
    { name: "another model", extra: { model: "other" }, expected: ["model"] },
    { name: "the same system, repeated", extra: { system: "Be brief." }, expected: [] },
    { name: "another system", extra: { system: "Be long." }, expected: ["system"] },
    { name: "the same tools with keys in another order", extra: { tools: [{ input_schema: { properties: { word: { type: "string" } }, type: "object" }, name: "lookup" }] }, expected: [] },
    { name: "another tool list", extra: { tools: [] }, expected: ["tools"] },
    { name: "model, system and tools all changed", extra: { model: "x", system: "y", tools: [{ name: "z", input_schema: {} }] }, expected: ["model", "system", "tools"] },
  ])("$name → $expected", ({ extra, expected }) => {
    expect(fingerprintMismatch(held, req(extra))).toEqual([...expected]);
  });

  test("a thread created without tools matches a continue that sends an empty list", () => {
    expect(fingerprintMismatch({ ...held, tools: undefined }, req({ tools: [] }))).toEqual([]);
  });

  test("the refusal names the first field and carries thread_fingerprint_mismatch", () => {
    const e = threadErrors.mismatch(["system", "tools"]);
    expect([e.status, e.param]).toEqual([400, "system"]);
    expect(e.message).toStartWith("system: `system` and `tools` must stay");
    expect(e.details).toEqual({ error_code: "thread_fingerprint_mismatch" });
  });
});

describe("a continue's request", () => {
  test("is the thread's system, tools and messages followed by the client's, with the client's other fields, without thread", () => {
    const merged = continueRequest(held, req({ thread: { type: "continue", previous_message_id: "msg_1" }, temperature: 0, tool_choice: { type: "auto" } }));
    expect(merged).toEqual({
      model: "chat",
      max_tokens: 16,
      temperature: 0,
      tool_choice: { type: "auto" },
      system: "Be brief.",
      tools,
      messages: [...held.messages, ...req().messages],
    } as MessagesInput);
    // It translates as the whole conversation would: the tool_result answers the thread's tool_use.
    const chat = toChatRequest(merged).request;
    expect(chat.messages.map((m) => m.role)).toEqual(["system", "user", "assistant", "tool"]);
    expect(chat.tools!.map((t) => t.function.name)).toEqual(["lookup"]);
  });

  test("a thread without system or tools adds none", () => {
    const merged = continueRequest({ ...held, system: undefined, tools: undefined, messages: [] }, req({ messages: [{ role: "user", content: "hi" }] }));
    expect("system" in merged || "tools" in merged).toBe(false);
  });
});

describe("errors named as the client sent its request", () => {
  const err = (param: string, message = `${param}: is wrong`) => new ApiError("invalid_request", message, { param, headers: { "x-a": "1" } });
  test.each([
    { name: "a new message: its index less the thread's", param: "messages[3].content[0].tool_use_id", expected: ["messages[1].content[0].tool_use_id", "messages[1].content[0].tool_use_id: is wrong"] },
    { name: "a held message: the thread", param: "messages[1].content[0]", expected: ["thread.previous_message_id", "thread.previous_message_id: in the thread's history, messages[1].content[0]: is wrong"] },
    { name: "another field: unchanged", param: "max_tokens", expected: ["max_tokens", "max_tokens: is wrong"] },
  ])("$name", ({ param, expected }) => {
    const e = relabelContinued(err(param), 2) as ApiError;
    expect([e.param, e.message]).toEqual([...expected]);
    expect(e.headers).toEqual({ "x-a": "1" });
  });

  test("an unthreaded request's errors are left as they are", () => {
    const e = err("messages[3]");
    expect(relabelContinued(e, 0)).toBe(e);
  });
});

test("every thread error renders in Anthropic's envelope with the details the OpenAPI document declares", () => {
  const errors = [threadErrors.notFound("msg_1"), threadErrors.alreadyContinued("msg_1"), threadErrors.inFlight("msg_1"), threadErrors.mismatch(["model"]), threadErrors.unsupported("too big")];
  expect(errors.map((e) => [e.status, e.details?.error_code])).toEqual([
    [404, "thread_not_found"],
    [400, "thread_already_continued"],
    [400, "thread_continue_in_flight"],
    [400, "thread_fingerprint_mismatch"],
    [400, "thread_unsupported_request"],
  ]);
  expect(AnthropicErrorBody.properties.error.properties.details).toBeDefined();
  for (const e of errors) expect(Value.Check(AnthropicErrorBody, toAnthropicErrorBody(e))).toBe(true);
});
