import { describe, expect, test } from "bun:test";
import { functionCallItem, messageItem, responseObject, toResponseUsage, toStatus, type ResponseContext } from "../../../src/1-api/responses/from-chat";
import type { ResponsesRequest } from "../../../src/1-api/responses/schema";
import { toChatRequest } from "../../../src/1-api/responses/to-chat";
import type { FinishReason } from "../../../src/3-engines/chat-job";

// Chat results → Responses pieces (spec §2.5), as tables.

describe("status", () => {
  const table: { finish: FinishReason; expected: ReturnType<typeof toStatus> }[] = [
    { finish: "stop", expected: { status: "completed", incomplete_details: null } },
    { finish: "tool_calls", expected: { status: "completed", incomplete_details: null } },
    { finish: "length", expected: { status: "incomplete", incomplete_details: { reason: "max_output_tokens" } } },
  ];
  for (const { finish, expected } of table)
    test(`finish_reason ${finish} is ${expected.status}`, () => {
      expect(toStatus(finish)).toEqual(expected);
    });
});

describe("usage", () => {
  const table = [
    {
      name: "input, cached and output tokens map across",
      chat: { prompt_tokens: 30, completion_tokens: 5, total_tokens: 35, prompt_tokens_details: { cached_tokens: 12 }, completion_tokens_details: { reasoning_tokens: 0 } },
      expected: { input_tokens: 30, input_tokens_details: { cached_tokens: 12 }, output_tokens: 5, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 35 },
    },
    {
      name: "reasoning tokens stay inside output_tokens and reasoning_tokens reads 0",
      chat: { prompt_tokens: 37, completion_tokens: 18, total_tokens: 55, prompt_tokens_details: { cached_tokens: 0 }, completion_tokens_details: { reasoning_tokens: 8 } },
      expected: { input_tokens: 37, input_tokens_details: { cached_tokens: 0 }, output_tokens: 18, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 55 },
    },
  ];
  for (const c of table)
    test(c.name, () => {
      expect(toResponseUsage(c.chat)).toEqual(c.expected);
    });
});

describe("output items", () => {
  const table = [
    { name: "an opening message item has no content yet", item: messageItem("msg_1", null, "in_progress"), expected: { type: "message", id: "msg_1", status: "in_progress", role: "assistant", content: [] } },
    {
      name: "a finished message item holds one output_text part",
      item: messageItem("msg_1", "Hi", "completed"),
      expected: { type: "message", id: "msg_1", status: "completed", role: "assistant", content: [{ type: "output_text", text: "Hi", annotations: [] }] },
    },
    {
      name: "a function_call item carries the chat call id as call_id",
      item: functionCallItem("fc_1", "call_1", "get_time", '{"zone":"utc"}', "completed"),
      expected: { type: "function_call", id: "fc_1", call_id: "call_1", name: "get_time", arguments: '{"zone":"utc"}', status: "completed" },
    },
  ];
  for (const c of table)
    test(c.name, () => {
      expect(c.item).toEqual(c.expected as any);
    });
});

describe("the response object", () => {
  const echo = toChatRequest({ model: "chat", input: "hi", instructions: "I", store: true, metadata: { k: "v" }, temperature: 0.2 } as ResponsesRequest).echo;
  const ctx: ResponseContext = { id: "resp_1", createdAt: 1700000000, model: "chat", echo, itemId: (k, i) => `${k}_${i}` };

  test("it has OpenAI's fields, in OpenAI's order, with the request's settings repeated", () => {
    const usage = toResponseUsage({ prompt_tokens: 3, completion_tokens: 2, total_tokens: 5, prompt_tokens_details: { cached_tokens: 0 }, completion_tokens_details: { reasoning_tokens: 0 } });
    const r = responseObject(ctx, { ...toStatus("stop"), output: [messageItem("msg_0", "ok", "completed")], usage });
    expect(Object.keys(r)).toEqual([
      "id", "object", "created_at", "status", "error", "incomplete_details", "instructions", "max_output_tokens", "model", "output", "parallel_tool_calls",
      "previous_response_id", "reasoning", "store", "temperature", "text", "tool_choice", "tools", "top_p", "truncation", "usage", "user", "metadata",
    ]);
    expect(r).toMatchObject({
      id: "resp_1",
      object: "response",
      created_at: 1700000000,
      status: "completed",
      error: null,
      incomplete_details: null,
      instructions: "I",
      previous_response_id: null,
      store: true,
      temperature: 0.2,
      truncation: "disabled",
      metadata: { k: "v" },
      usage,
    });
  });

  test("an incomplete response says why", () => {
    const r = responseObject(ctx, { ...toStatus("length"), output: [], usage: null });
    expect([r.status, r.incomplete_details]).toEqual(["incomplete", { reason: "max_output_tokens" }]);
  });
});
