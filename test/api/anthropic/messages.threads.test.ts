import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import { ManualClock } from "../../../src/lib/clock";
import type { TestApp } from "../../helpers/app";
import { chatTestApp } from "../../helpers/chat";
import { checkMessagesStream, foldMessagesStream, parseSse } from "./invariants";

// Message threads on /v1/messages (issue 42 item 2), through the real app, its SQLite store and the
// tiny chat model: `thread: {type:"create"}` keeps the conversation under the reply's id, and
// `{type:"continue", previous_message_id}` sends only the new messages. Before, the field was
// dropped silently (then refused): none of these held.

let t: TestApp;
const clock = new ManualClock(Date.now());
beforeAll(async () => {
  t = await chatTestApp({ clock });
});
afterAll(() => t.close());

const DEFAULTS = { enabled: true, ttl_s: 86400, max_per_key: 100, max_mb_per_key: 64 };
beforeEach(() => Object.assign(t.deps.config.threads, DEFAULTS));

const BETA = { "anthropic-beta": "message-threads-2026-08-12", "anthropic-version": "2023-06-01" };
const user = (content: unknown) => ({ role: "user", content });
const create = { type: "create" };
const cont = (id: string) => ({ type: "continue", previous_message_id: id });
const base = { model: "chat", max_tokens: 8, temperature: 0 };

async function post(key: string, body: object, path = "/v1/messages") {
  const res = await t.request("POST", path, { key, body, headers: BETA });
  return { status: res.status, json: (await res.json()) as any };
}
async function ok(key: string, body: object) {
  const r = await post(key, body);
  expect(r.status).toBe(200);
  return r.json;
}
/** The Anthropic error envelope with the error_code the SDK reads from error.details. */
function expectThreadError(r: { status: number; json: any }, status: number, code: string, param?: string) {
  expect(r.status).toBe(status);
  expect(r.json.type).toBe("error");
  expect(r.json.error.details).toEqual({ error_code: code });
  if (param) expect(r.json.error.message).toStartWith(`${param}: `);
}
/** A streamed request read up to its message_start, then cut: what an interrupted client leaves behind. */
async function cutStream(key: string, body: object): Promise<string> {
  const res = await t.request("POST", "/v1/messages", { key, body: { ...body, stream: true }, headers: BETA });
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  let text = "";
  while (!text.includes("\n\n")) text += new TextDecoder().decode((await reader.read()).value);
  await reader.cancel();
  return /"id":"(msg_[^"]+)"/.exec(text)![1]!;
}
const LONG = { ...base, max_tokens: 3000, messages: [user("Count slowly.")] };

describe("create and continue", () => {
  test("a continue sends only the new turn and is answered, and billed, as the whole conversation sent unthreaded", async () => {
    const key = await t.key({ creditUsd: 5 });
    const first = await ok(key, { ...base, system: "Be brief.", messages: [user("Hello there")], thread: create });
    expect(first.id).toMatch(/^msg_/);
    const second = await ok(key, { ...base, messages: [user("And then?")], thread: cont(first.id) });
    const whole = await ok(key, { ...base, system: "Be brief.", messages: [user("Hello there"), { role: "assistant", content: first.content }, user("And then?")] });
    expect(second.content).toEqual(whole.content);
    const prompt = (m: any) => m.usage.input_tokens + m.usage.cache_read_input_tokens;
    expect(prompt(second)).toBe(prompt(whole));
    expect(prompt(second)).toBeGreaterThan(prompt(first));
    // The usage row of the continue charges the whole prompt it ran.
    const rows = t.deps.db!.query<{ input_tokens: number; cached_tokens: number }, []>("SELECT input_tokens, cached_tokens FROM usage ORDER BY rowid DESC LIMIT 2").all();
    expect(rows[0]!.input_tokens).toBe(rows[1]!.input_tokens);
    // The thread goes on from its latest reply, and each reply is continued once.
    const third = await ok(key, { ...base, messages: [user("Last one.")], thread: cont(second.id) });
    expect(third.id).not.toBe(second.id);
    expectThreadError(await post(key, { ...base, messages: [user("Again?")], thread: cont(first.id) }), 400, "thread_already_continued", "thread.previous_message_id");
    expectThreadError(await post(key, { ...base, messages: [user("Again?")], thread: cont(second.id) }), 400, "thread_already_continued");
  }, 60_000);

  test("a tool round trip: the continue carries only the tool_result, and the thread's tools and system answer it", async () => {
    const key = await t.key({ creditUsd: 5 });
    const tools = [{ name: "lookup", description: "Looks up a word", input_schema: { type: "object", properties: { word: { type: "string", maxLength: 8 } }, required: ["word"] } }];
    const first = await ok(key, {
      ...base,
      max_tokens: 60,
      system: "Use tools.",
      tools,
      tool_choice: { type: "tool", name: "lookup", disable_parallel_tool_use: true },
      messages: [user("Look up cat.")],
      thread: create,
    });
    expect(first.stop_reason).toBe("tool_use");
    const call = first.content.find((b: any) => b.type === "tool_use");
    const second = await ok(key, {
      ...base,
      // tool_choice names a tool of the thread's list: it is checked against the tools the thread holds.
      tool_choice: { type: "auto" },
      messages: [user([{ type: "tool_result", tool_use_id: call.id, content: "found" }])],
      thread: cont(first.id),
    });
    expect(second.type).toBe("message");
    // An answer to no call of the thread is named as the client sent it (messages[0], not its place in the thread).
    const stray = await post(key, { ...base, messages: [user([{ type: "tool_result", tool_use_id: "toolu_nope", content: "x" }])], thread: cont(second.id) });
    expect(stray.status).toBe(400);
    expect(stray.json.error.message).toStartWith("messages[0].content[0].tool_use_id: ");
  }, 60_000);

  test("streamed turns create and continue a thread; the reply kept is the one the stream folds into", async () => {
    const key = await t.key({ creditUsd: 5 });
    const stream = async (body: object) => {
      const res = await t.request("POST", "/v1/messages", { key, body: { ...body, stream: true }, headers: BETA });
      expect(res.status).toBe(200);
      const events = parseSse(await res.text());
      checkMessagesStream(events);
      return foldMessagesStream(events);
    };
    const first = await stream({ ...base, messages: [user("Stream me")], thread: create });
    const second = await stream({ ...base, messages: [user("More")], thread: cont(first.id) });
    const whole = await ok(key, { ...base, messages: [user("Stream me"), { role: "assistant", content: first.content }, user("More")] });
    expect(second.content).toEqual(whole.content);
  }, 60_000);

  test("count_tokens with a continue counts the prompt the turn would run, without taking the thread", async () => {
    const key = await t.key({ creditUsd: 5 });
    const first = await ok(key, { ...base, system: "Count me.", messages: [user("One")], thread: create });
    const count = async (body: object) => {
      const r = await post(key, body, "/v1/messages/count_tokens");
      expect(r.status).toBe(200);
      return r.json.input_tokens as number;
    };
    const threaded = await count({ model: "chat", messages: [user("Two")], thread: cont(first.id) });
    const whole = await count({ model: "chat", system: "Count me.", messages: [user("One"), { role: "assistant", content: first.content }, user("Two")] });
    expect(threaded).toBe(whole);
    await ok(key, { ...base, messages: [user("Two")], thread: cont(first.id) });
    expectThreadError(await post(key, { model: "chat", messages: [user("x")], thread: cont("msg_unknown") }, "/v1/messages/count_tokens"), 404, "thread_not_found");
  }, 60_000);
});

describe("what a continue may not do", () => {
  test("another key's thread is not found, and neither is an id no thread has", async () => {
    const owner = await t.key({ creditUsd: 5 });
    const stranger = await t.key({ creditUsd: 5 });
    const first = await ok(owner, { ...base, messages: [user("Mine")], thread: create });
    const r = await post(stranger, { ...base, messages: [user("Yours?")], thread: cont(first.id) });
    expectThreadError(r, 404, "thread_not_found", "thread.previous_message_id");
    expect(r.json.error.type).toBe("not_found_error");
    expectThreadError(await post(owner, { ...base, messages: [user("?")], thread: cont("msg_made_up") }), 404, "thread_not_found");
    // The stranger's attempt took nothing: the owner continues.
    await ok(owner, { ...base, messages: [user("Still mine")], thread: cont(first.id) });
  }, 60_000);

  test("the model must stay; system and tools come from the thread and may be repeated only unchanged", async () => {
    const key = await t.key({ creditUsd: 5 });
    const first = await ok(key, { ...base, system: "Be brief.", messages: [user("Hi")], thread: create });
    const model = await post(key, { ...base, model: "small-chat", messages: [user("x")], thread: cont(first.id) });
    expectThreadError(model, 400, "thread_fingerprint_mismatch", "model");
    expectThreadError(await post(key, { ...base, system: "Be long.", messages: [user("x")], thread: cont(first.id) }), 400, "thread_fingerprint_mismatch", "system");
    const tools = [{ name: "t", input_schema: { type: "object" } }];
    expectThreadError(await post(key, { ...base, tools, messages: [user("x")], thread: cont(first.id) }), 400, "thread_fingerprint_mismatch", "tools");
    // Refusals release the thread: the same system repeated is answered.
    await ok(key, { ...base, system: [{ type: "text", text: "Be brief." }].map((b) => b.text).join(""), messages: [user("x")], thread: cont(first.id) });
  }, 60_000);

  test("a continue in flight holds its reply: a second one is thread_continue_in_flight until the first ends", async () => {
    const key = await t.key({ creditUsd: 5 });
    const first = await ok(key, { ...base, messages: [user("Go")], thread: create });
    const res = await t.request("POST", "/v1/messages", { key, body: { ...LONG, stream: true, thread: cont(first.id) }, headers: BETA });
    const reader = res.body!.getReader();
    await reader.read();
    expectThreadError(await post(key, { ...base, messages: [user("Me too")], thread: cont(first.id) }), 400, "thread_continue_in_flight");
    await reader.cancel();
    await ok(key, { ...base, messages: [user("Now me")], thread: cont(first.id) });
  }, 60_000);

  test("a thread field that is neither create nor continue is a 400 naming it", async () => {
    const key = await t.key({ creditUsd: 5 });
    const bad = async (thread: unknown, param: string) => {
      const r = await post(key, { ...base, messages: [user("x")], thread });
      expect(r.status).toBe(400);
      expect(r.json.error.type).toBe("invalid_request_error");
      expect(r.json.error.message).toStartWith(`${param}: `);
    };
    await bad({ type: "fork" }, "thread.type");
    await bad({ type: "continue" }, "thread.previous_message_id");
    await bad({ type: "create", previous_message_id: "msg_1" }, "thread.previous_message_id");
  });
});

describe("the server holds the whole reply or none of it", () => {
  test("a streamed create cut before message_stop keeps nothing", async () => {
    const key = await t.key({ creditUsd: 5 });
    const id = await cutStream(key, { ...LONG, thread: create });
    expectThreadError(await post(key, { ...base, messages: [user("x")], thread: cont(id) }), 404, "thread_not_found");
  }, 60_000);

  test("a streamed continue cut before message_stop keeps nothing and releases the thread for the next continue", async () => {
    const key = await t.key({ creditUsd: 5 });
    const first = await ok(key, { ...base, messages: [user("Start")], thread: create });
    const cut = await cutStream(key, { ...LONG, thread: cont(first.id) });
    expectThreadError(await post(key, { ...base, messages: [user("x")], thread: cont(cut) }), 404, "thread_not_found");
    const again = await ok(key, { ...base, messages: [user("Retry")], thread: cont(first.id) });
    await ok(key, { ...base, messages: [user("On")], thread: cont(again.id) });
  }, 60_000);

  test("a continue that fails (a model error) releases the thread", async () => {
    const key = await t.key({ creditUsd: 5 });
    const first = await ok(key, { ...base, messages: [user("Start")], thread: create });
    // max_tokens past the model's context: refused by the chat layer after the thread was claimed.
    const refused = await post(key, { ...base, max_tokens: 100_000, messages: [user("x")], thread: cont(first.id) });
    expect(refused.status).toBe(400);
    await ok(key, { ...base, messages: [user("Fine")], thread: cont(first.id) });
  }, 60_000);
});

describe("per key, bounded, expiring", () => {
  test("a thread not continued for ttl_s is gone", async () => {
    t.deps.config.threads.ttl_s = 60;
    const key = await t.key({ creditUsd: 5 });
    const first = await ok(key, { ...base, messages: [user("Soon gone")], thread: create });
    clock.advance(30_000);
    const second = await ok(key, { ...base, messages: [user("Still here")], thread: cont(first.id) });
    clock.advance(59_000); // idle time counts from the last turn
    const third = await ok(key, { ...base, messages: [user("Still")], thread: cont(second.id) });
    clock.advance(60_000);
    expectThreadError(await post(key, { ...base, messages: [user("Gone?")], thread: cont(third.id) }), 404, "thread_not_found");
  }, 60_000);

  test("past max_per_key the least recently used thread of the key is dropped; other keys keep theirs", async () => {
    t.deps.config.threads.max_per_key = 2;
    const key = await t.key({ creditUsd: 5 });
    const other = await t.key({ creditUsd: 5 });
    const theirs = await ok(other, { ...base, messages: [user("Theirs")], thread: create });
    const a = await ok(key, { ...base, messages: [user("A")], thread: create });
    clock.advance(1000);
    const b = await ok(key, { ...base, messages: [user("B")], thread: create });
    clock.advance(1000);
    const a2 = await ok(key, { ...base, messages: [user("A again")], thread: cont(a.id) });
    clock.advance(1000);
    await ok(key, { ...base, messages: [user("C")], thread: create });
    expectThreadError(await post(key, { ...base, messages: [user("B?")], thread: cont(b.id) }), 404, "thread_not_found");
    await ok(key, { ...base, messages: [user("A on")], thread: cont(a2.id) });
    await ok(other, { ...base, messages: [user("Theirs on")], thread: cont(theirs.id) });
  }, 60_000);

  test("past max_mb_per_key the oldest threads go, and a thread larger than that is refused with thread_unsupported_request", async () => {
    t.deps.config.threads.max_mb_per_key = 2000 / (1024 * 1024); // 2000 bytes
    const key = await t.key({ creditUsd: 5 });
    const words = (n: number) => Array.from({ length: n }, (_, i) => `w${i}`).join(" ");
    const a = await ok(key, { ...base, messages: [user(words(150))], thread: create }); // ~800 bytes with its reply
    clock.advance(1000);
    const b = await ok(key, { ...base, messages: [user(words(150))], thread: create });
    clock.advance(1000);
    await ok(key, { ...base, messages: [user(words(150))], thread: create });
    expectThreadError(await post(key, { ...base, messages: [user("a?")], thread: cont(a.id) }), 404, "thread_not_found");
    await ok(key, { ...base, messages: [user("b on")], thread: cont(b.id) });
    const big = await post(key, { ...base, messages: [user(words(600))], thread: create });
    expectThreadError(big, 400, "thread_unsupported_request", "thread");
    expect(big.json.error.message).toContain("more than the 2000");
  }, 60_000);
});

describe("[threads] enabled = false", () => {
  test("create is thread_unsupported_request and continue thread_not_found: the codes after which the SDK sends the whole conversation", async () => {
    const key = await t.key({ creditUsd: 5 });
    const kept = await ok(key, { ...base, messages: [user("Before")], thread: create });
    t.deps.config.threads.enabled = false;
    expectThreadError(await post(key, { ...base, messages: [user("x")], thread: create }), 400, "thread_unsupported_request", "thread");
    expectThreadError(await post(key, { ...base, messages: [user("x")], thread: cont(kept.id) }), 404, "thread_not_found");
    // Without `thread` nothing changes, with the threads beta header or not.
    await ok(key, { ...base, messages: [user("Plain")] });
  }, 60_000);
});
