import { describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import { betaTool } from "@anthropic-ai/sdk/helpers/beta/json-schema";
import { useDemoServer, type DemoServer } from "./demo-server";
import { expectAnswered, type Recorded, type RecordingProxy } from "./recording-proxy";

// The Anthropic SDK's message threads (1.14, unmodified) against `serve --demo`. Its `Anthropic`
// client runs the tool runner over a thread: the first turn sends `thread: {type: "create"}` with
// the whole conversation, each later turn `thread: {type: "continue", previous_message_id}` with
// only the new messages (beta message-threads-2026-08-12). Issue 42: the server ignored `thread`,
// so the second turn was a lone tool_result → 400; it now keeps the thread, and the recording
// proxy shows the continue carrying only the tool result, answered 2xx.

let key: string;
let proxy: RecordingProxy;
let demo: DemoServer;
useDemoServer((s) => ({ key, proxy } = demo = s));

const client = () => new Anthropic({ apiKey: key, baseURL: proxy.url, maxRetries: 0 });
const BETA = "message-threads-2026-08-12";

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

type Body = { thread?: { type: string; previous_message_id?: string }; messages: { role: string; content: unknown }[]; tools?: unknown; system?: unknown };
const turnsOf = (sent: Recorded[]) => sent.filter((r) => r.method === "POST" && r.path.split("?")[0] === "/v1/messages");

/** Each turn after the first continued from the reply before it, sending only what the server lacked. */
function expectThreaded(sent: Recorded[], replies: Anthropic.Beta.BetaMessage[]) {
  expectAnswered(sent);
  const turns = turnsOf(sent);
  expect(turns.length).toBe(replies.length);
  for (const t of turns) expect(t.headers["anthropic-beta"]).toContain(BETA);
  const [first, ...rest] = turns.map((t) => t.body as Body);
  expect(first!.thread).toEqual({ type: "create" });
  rest.forEach((body, i) => {
    expect(body.thread).toEqual({ type: "continue", previous_message_id: replies[i]!.id });
    // No replay: the thread holds the history, its system and its tools.
    expect(body.tools).toBeUndefined();
    expect(body.system).toBeUndefined();
    expect(body.messages).toHaveLength(1);
    expect(body.messages[0]!.role).toBe("user");
  });
}

describe.each([false, true])("tool runner, stream %p", (stream) => {
  test("runs the tool and continues the thread with only its result, every request answered 2xx", async () => {
    const calls: unknown[] = [];
    const { result: replies, sent } = await proxy.recording(async () => {
      const runner = client().beta.messages.toolRunner({
        model: "demo-chat",
        max_tokens: 64,
        system: "Use the tool.",
        messages: [{ role: "user", content: "Look up the word 'cat'." }],
        tools: [lookupTool(calls)],
        // The demo model has random weights: forcing the tool makes the round trip certain; it stays
        // forced on the second turn, so max_iterations ends the run.
        tool_choice: { type: "tool", name: "lookup" },
        max_iterations: 2,
        ...(stream ? { stream: true as const } : {}),
      });
      const out: Anthropic.Beta.BetaMessage[] = [];
      for await (const m of runner) out.push(stream ? await (m as { finalMessage(): Promise<Anthropic.Beta.BetaMessage> }).finalMessage() : (m as Anthropic.Beta.BetaMessage));
      return out;
    });
    expect(replies).toHaveLength(2);
    expect(calls.length).toBeGreaterThanOrEqual(1);
    for (const c of calls) expect(typeof (c as { word: unknown }).word).toBe("string");
    expectThreaded(sent, replies);
    // The continue answered the first reply's call: its one message is that tool_result.
    const call = replies[0]!.content.find((b) => b.type === "tool_use")!;
    const second = turnsOf(sent)[1]!.body as Body;
    expect(second.messages[0]!.content).toEqual([expect.objectContaining({ type: "tool_result", tool_use_id: call.id })]);
    expect(replies[1]!.stop_reason).toBe("tool_use");
  }, 120_000);
});

test("client.beta.messages.thread(): two sends, the second a continue with only its own message", async () => {
  const { result: replies, sent } = await proxy.recording(async () => {
    const thread = client().beta.messages.thread({ model: "demo-chat", max_tokens: 8, system: "Be brief." });
    const first = await thread.send({ role: "user", content: "hi" });
    const second = await thread.send({ role: "user", content: "and again" });
    expect(thread.previousMessageId).toBe(second.id);
    expect(thread.messages).toHaveLength(4);
    return [first, second];
  });
  expectThreaded(sent, replies);
  expect((turnsOf(sent)[1]!.body as Body).messages).toEqual([{ role: "user", content: "and again" }]);
}, 120_000);

test("a thread the server no longer holds (expired, dropped) is replayed by the SDK itself: thread_not_found, then create with the whole conversation", async () => {
  const { result: reply, sent } = await proxy.recording(async () => {
    const thread = client().beta.messages.thread({ model: "demo-chat", max_tokens: 8 });
    await thread.send({ role: "user", content: "hi" });
    // As an expiry or a key's bounds would: the thread is gone from the store.
    demo.server.deps.db!.run("DELETE FROM message_threads");
    return thread.send({ role: "user", content: "still there?" });
  });
  const turns = turnsOf(sent).map((t) => ({ status: t.status, thread: (t.body as Body).thread?.type, messages: (t.body as Body).messages.length }));
  expect(turns).toEqual([
    { status: 200, thread: "create", messages: 1 },
    { status: 404, thread: "continue", messages: 1 },
    { status: 200, thread: "create", messages: 3 },
  ]);
  expect(reply.type).toBe("message");
}, 120_000);

test("a continue from a reply the server does not hold is 404 thread_not_found, after which the SDK replays the whole conversation", async () => {
  const res = await fetch(`${proxy.url}/v1/messages`, {
    method: "POST",
    headers: { "x-api-key": key, "content-type": "application/json", "anthropic-version": "2023-06-01", "anthropic-beta": BETA },
    body: JSON.stringify({ model: "demo-chat", max_tokens: 8, messages: [{ role: "user", content: "hi" }], thread: { type: "continue", previous_message_id: "msg_1" } }),
  });
  expect(res.status).toBe(404);
  expect(await res.json()).toMatchObject({ type: "error", error: { type: "not_found_error", details: { error_code: "thread_not_found" } } });
});
