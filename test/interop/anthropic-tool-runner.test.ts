import { describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import { betaTool } from "@anthropic-ai/sdk/helpers/beta/json-schema";
import { useDemoServer } from "./demo-server";
import { expectAnswered, type Recorded, type RecordingProxy } from "./recording-proxy";

// The Anthropic SDK's tool runner (1.14, unmodified) against `serve --demo`. Its `Anthropic` client
// starts a message thread (`thread: {type: "create"}`, beta message-threads-2026-08-12) and then
// sends only the new turn. Issue 42: the server ignored `thread`, so the second turn was a lone
// tool_result → 400. Threads are not kept here: the first request is refused with the error code
// the SDK recovers from (thread_unsupported_request), after which the runner sends the whole
// conversation each turn and completes the tool round trip, streamed and not.

let key: string;
let proxy: RecordingProxy;
useDemoServer((s) => ({ key, proxy } = s));

const client = () => new Anthropic({ apiKey: key, baseURL: proxy.url, maxRetries: 0 });

function lookupTool(calls: unknown[]) {
  return betaTool({
    name: "lookup",
    description: "Looks up a word",
    inputSchema: { type: "object", properties: { word: { type: "string", maxLength: 12 } }, required: ["word"], additionalProperties: false },
    run: (input) => {
      calls.push(input);
      return "found";
    },
  });
}

/** The thread refusal, then every request without `thread` and answered 2xx; the tool's result went back with the history. */
function expectUnthreadedRoundTrip(sent: Recorded[], calls: unknown[]) {
  const turns = sent.filter((r) => r.path === "/v1/messages");
  const [first, ...rest] = turns;
  expect(first!.status).toBe(400);
  expect((first!.body as { thread: unknown }).thread).toEqual({ type: "create" });
  expect(rest.length).toBeGreaterThanOrEqual(2);
  for (const r of rest) expect((r.body as { thread?: unknown }).thread).toBeUndefined();
  expectAnswered(rest);
  expect(calls.length).toBeGreaterThanOrEqual(1);
  for (const c of calls) expect(typeof (c as { word: unknown }).word).toBe("string");
  // The turn after the tool ran carries the whole conversation: the user's message, the tool_use and its result.
  const second = rest[1]!.body as { messages: { role: string; content: unknown }[]; tools: unknown[] };
  expect(second.tools).toHaveLength(1);
  expect(second.messages[0]).toMatchObject({ role: "user" });
  expect(JSON.stringify(second.messages)).toContain('"tool_result"');
  expect(JSON.stringify(second.messages)).toContain('"tool_use"');
}

describe.each([false, true])("tool runner, stream %p", (stream) => {
  test("completes a tool round trip: the thread refused once with thread_unsupported_request, then the whole conversation each turn", async () => {
    const calls: unknown[] = [];
    const { result, sent } = await proxy.recording(async () => {
      const runner = client().beta.messages.toolRunner({
        model: "demo-chat",
        max_tokens: 64,
        messages: [{ role: "user", content: "Look up the word 'cat'." }],
        tools: [lookupTool(calls)],
        // The demo model has random weights: forcing the tool makes the round trip certain.
        tool_choice: { type: "tool", name: "lookup" },
        max_iterations: 2,
        ...(stream ? { stream: true as const } : {}),
      });
      let messages = 0;
      for await (const m of runner) {
        if (stream) for await (const _ of m as AsyncIterable<unknown>) void _;
        messages++;
      }
      return messages;
    });
    expect(result).toBe(2);
    expectUnthreadedRoundTrip(sent, calls);
  }, 120_000);
});

test("a thread the caller starts itself (client.beta.messages.thread) is refused with the SDK's own error class, saying why", async () => {
  const thread = client().beta.messages.thread({ model: "demo-chat", max_tokens: 8 });
  const err = await thread.send({ role: "user", content: "hi" }).then(
    () => null,
    (e) => e,
  );
  expect(err).toBeInstanceOf(Anthropic.BadRequestError);
  expect(err.constructor.name).toBe("ThreadUnsupportedRequestError");
  expect(err.message).toContain("this server does not keep message threads");
});

test("a continue names no thread here: 404 thread_not_found, which makes the SDK replay the whole conversation", async () => {
  const res = await fetch(`${proxy.url}/v1/messages`, {
    method: "POST",
    headers: { "x-api-key": key, "content-type": "application/json", "anthropic-version": "2023-06-01", "anthropic-beta": "message-threads-2026-08-12" },
    body: JSON.stringify({ model: "demo-chat", max_tokens: 8, messages: [{ role: "user", content: "hi" }], thread: { type: "continue", previous_message_id: "msg_1" } }),
  });
  expect(res.status).toBe(404);
  expect(await res.json()).toMatchObject({ type: "error", error: { type: "not_found_error", details: { error_code: "thread_not_found" } } });
});
