import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import { ApiError, ERROR_TABLE, renderError } from "../../../src/1-api/http/errors";
import { chunk, type CompletionIds } from "../../../src/2-services/chat/completion";
import type { ChatRun, ChatService } from "../../../src/2-services/chat/service";
import { testApp, type TestApp } from "../../helpers/app";
import { chatTestApp } from "../../helpers/chat";
import { anthropicClient } from "./client";
import { checkMessagesStream, parseSse } from "./invariants";

// Errors on /v1/messages in Anthropic's envelope {type:"error",error:{type,message}}, as the
// official client sees them (spec §7), and failures after a stream began (an `error` event).

let t: TestApp;
let key: string;
let client: Anthropic;
beforeAll(async () => {
  t = await chatTestApp();
  key = await t.key({ creditUsd: 5 });
  client = anthropicClient(t, { apiKey: key });
});
afterAll(() => t.close());

const hi = [{ role: "user" as const, content: "hi" }];

async function sdkError(p: Promise<unknown>): Promise<InstanceType<typeof Anthropic.APIError>> {
  const err = await p.then(
    () => null,
    (e) => e,
  );
  expect(err).toBeInstanceOf(Anthropic.APIError);
  return err;
}

describe("error types through the official client", () => {
  test("a wrong key is AuthenticationError (401 authentication_error)", async () => {
    const err = await sdkError(anthropicClient(t, { apiKey: "sk-apl-" + "A".repeat(44) }).messages.create({ model: "chat", max_tokens: 1, messages: hi }));
    expect(err).toBeInstanceOf(Anthropic.AuthenticationError);
    expect(err.type).toBe("authentication_error");
    expect(err.apiMessage).toBe("Invalid API key");
  });

  test("a key without the inference scope is PermissionDeniedError (403 permission_error)", async () => {
    const err = await sdkError(anthropicClient(t, { apiKey: await t.key({ scopes: ["rental"] }) }).messages.create({ model: "chat", max_tokens: 1, messages: hi }));
    expect(err).toBeInstanceOf(Anthropic.PermissionDeniedError);
    expect(err.type).toBe("permission_error");
  });

  // Elysia drops undeclared fields of a closed schema before the route sees the body: a field the
  // server does not know must reach the translator to be refused by name (spec §4 rule 2).
  test("a top-level field the server does not know is a 400 naming it, not dropped on the way in", async () => {
    const err = await sdkError(client.messages.create({ model: "chat", max_tokens: 1, messages: hi, not_a_field: { type: "create" } } as never));
    expect(err).toBeInstanceOf(Anthropic.BadRequestError);
    expect(err.apiMessage).toStartWith("not_a_field: ");
    const counted = await sdkError(client.messages.countTokens({ model: "chat", messages: hi, not_a_field: 1 } as never));
    expect(counted.apiMessage).toStartWith("not_a_field: ");
  });

  test("an unknown model is NotFoundError (404 not_found_error)", async () => {
    const err = await sdkError(client.messages.create({ model: "claude-nope", max_tokens: 1, messages: hi }));
    expect(err).toBeInstanceOf(Anthropic.NotFoundError);
    expect(err.type).toBe("not_found_error");
    expect(err.apiMessage).toContain("claude-nope");
  });

  test("a client-run Anthropic tool is BadRequestError naming tools[n]", async () => {
    const err = await sdkError(
      client.messages.create({
        model: "chat",
        max_tokens: 1,
        messages: hi,
        tools: [{ name: "f", input_schema: { type: "object" } }, { type: "bash_20250124", name: "bash" }],
      }),
    );
    expect(err).toBeInstanceOf(Anthropic.BadRequestError);
    expect(err.type).toBe("invalid_request_error");
    expect(err.apiMessage!.startsWith("tools[1]: ")).toBe(true);
  });

  test("past the key's rate limit is RateLimitError (429 rate_limit_error) with Retry-After", async () => {
    const limited = anthropicClient(t, { apiKey: await t.key({ rpm: 1, creditUsd: 1 }) });
    await sdkError(limited.messages.create({ model: "nope", max_tokens: 1, messages: hi }));
    const err = await sdkError(limited.messages.create({ model: "nope", max_tokens: 1, messages: hi }));
    expect(err).toBeInstanceOf(Anthropic.RateLimitError);
    expect(err.type).toBe("rate_limit_error");
    expect(Number(err.headers!.get("retry-after"))).toBeGreaterThan(0);
  });

  test("a key without balance is 402 billing_error", async () => {
    const err = await sdkError(anthropicClient(t, { apiKey: await t.key({ kind: "premium" }) }).messages.create({ model: "chat", max_tokens: 1, messages: hi }));
    expect(err.status).toBe(402);
    expect(err.type).toBe("billing_error");
  });

  test("a prompt longer than the context window is 400 invalid_request_error, never truncated", async () => {
    const err = await sdkError(client.messages.create({ model: "tight", max_tokens: 1, messages: [{ role: "user", content: "word ".repeat(400) }] }));
    expect(err).toBeInstanceOf(Anthropic.BadRequestError);
    expect(err.apiMessage).toMatch(/^prompt is too long: \d+ tokens > 256 maximum$/); // Anthropic's words (to-chat.ts overflow)
  });

  test("every error code renders its Anthropic type with its status", () => {
    const expected: Record<number, string[]> = {
      400: ["invalid_request_error"],
      401: ["authentication_error"],
      402: ["billing_error"],
      403: ["permission_error"],
      404: ["not_found_error"],
      408: ["invalid_request_error"], // a request body that arrived too slowly
      409: ["invalid_request_error"],
      422: ["invalid_request_error"],
      413: ["request_too_large"],
      429: ["rate_limit_error"],
      499: ["invalid_request_error"], // logs only: the client has gone
      500: ["api_error"],
      502: ["api_error"], // a server behind the appliance (a rental notebook) failed
      503: ["overloaded_error", "api_error"], // busy (retry) or a model that cannot load (model_load_failed: retrying does not help)
      507: ["api_error"], // no room left on the disk for an upload
    };
    for (const code of Object.keys(ERROR_TABLE) as (keyof typeof ERROR_TABLE)[]) {
      const res = renderError(new ApiError(code, "m"), "anthropic");
      expect(expected[res.status]).toContain(ERROR_TABLE[code].anthropicType);
    }
  });
});

describe("bad bodies are 400 invalid_request_error naming the field", () => {
  const ok = { model: "chat", max_tokens: 4, messages: hi };
  test.each([
    { body: { model: "chat", messages: hi }, param: "max_tokens" },
    { body: { ...ok, max_tokens: 0 }, param: "max_tokens" },
    { body: { model: "chat", max_tokens: 4 }, param: "messages" },
    { body: { ...ok, messages: [] }, param: "messages" },
    { body: { ...ok, messages: [{ role: "robot", content: "x" }] }, param: "messages[0].role" },
    { body: { ...ok, messages: [{ role: "user", content: 5 }] }, param: "messages[0].content" },
    { body: { ...ok, temperature: 1.5 }, param: "temperature" },
    { body: { ...ok, stream: "yes" }, param: "stream" },
    { body: { ...ok, stop_sequences: Array.from({ length: 17 }, (_, i) => `s${i}`) }, param: "stop_sequences" },
    { body: { ...ok, tools: [{ name: "f" }] }, param: "tools[0]" },
    { body: { ...ok, tool_choice: { type: "any" } }, param: "tool_choice" },
    { body: { ...ok, thinking: { type: "enabled", budget_tokens: 0 } }, param: "thinking.budget_tokens" },
    // Raised by the chat layer, named as the Messages field it came from:
    {
      body: { ...ok, system: "s", messages: [{ role: "user", content: [{ type: "text", text: "what is it" }, { type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } }] }] },
      param: "messages[0].content[1]",
    },
    { body: { ...ok, tools: [{ name: "f", strict: true, input_schema: { type: "object", properties: { s: { type: "array", uniqueItems: true } } } }] }, param: "tools[0].input_schema.properties.s.uniqueItems", prefix: "tools[0].input_schema.properties.s" },
  ] as { body: unknown; param: string; prefix?: string }[])("$param", async ({ body, param, prefix }) => {
    const res = await t.request("POST", "/v1/messages", { key, body });
    expect(res.status).toBe(400);
    const e = await res.json();
    expect(e.type).toBe("error");
    expect(e.error.type).toBe("invalid_request_error");
    expect(e.error.message.startsWith(`${prefix ?? param}: `)).toBe(true);
  });

  test("a body that is not JSON is 400 invalid_request_error", async () => {
    const res = await t.request("POST", "/v1/messages", { key, body: "{not json" });
    expect(res.status).toBe(400);
    expect((await res.json()).error.type).toBe("invalid_request_error");
  });

  test("an unknown path under /v1/messages is 404 not_found_error in the Anthropic envelope", async () => {
    const res = await t.request("POST", "/v1/messages/batches", { key, body: {} });
    expect(res.status).toBe(404);
    expect(await res.json()).toMatchObject({ type: "error", error: { type: "not_found_error" } });
  });
});

describe("count_tokens errors", () => {
  test("an unknown model is 404, a missing field 400, a server tool 400 naming it", async () => {
    expect((await sdkError(client.messages.countTokens({ model: "nope", messages: hi })))).toBeInstanceOf(Anthropic.NotFoundError);
    const res = await t.request("POST", "/v1/messages/count_tokens", { key, body: { model: "chat" } });
    expect(res.status).toBe(400);
    expect((await res.json()).error.message.startsWith("messages: ")).toBe(true);
    const err = await sdkError(client.messages.countTokens({ model: "chat", messages: hi, tools: [{ type: "bash_20250124", name: "bash" }] }));
    expect(err.apiMessage!.startsWith("tools[0]: ")).toBe(true);
  });
});

describe("failures of the chat service", () => {
  let f: TestApp;
  let fkey: string;
  let fail: "before" | "during" = "during";
  beforeAll(async () => {
    // The real app with a chat service that fails before the answer or in the middle of it.
    f = testApp({ override: (deps) => ({ chat: failingChat(deps.chat, () => fail) }) });
    fkey = await f.key({ creditUsd: 1 });
  });
  afterAll(() => f.close());

  test("a failure before the answer is an HTTP error: 503 overloaded_error", async () => {
    fail = "before";
    const err = await sdkError(anthropicClient(f, { apiKey: fkey }).messages.create({ model: "chat", max_tokens: 4, messages: hi }));
    expect(err.status).toBe(503);
    expect(err.type).toBe("overloaded_error");
  });

  test("a failure mid-stream is an error event, then the stream ends", async () => {
    fail = "during";
    const res = await f.request("POST", "/v1/messages", { key: fkey, body: { model: "chat", max_tokens: 4, stream: true, messages: hi } });
    expect(res.status).toBe(200);
    const events = parseSse(await res.text());
    checkMessagesStream(events);
    expect(events.map((e) => e.event)).toEqual(["message_start", "content_block_start", "content_block_delta", "error"]);
    expect(events.at(-1)!.data).toEqual({ type: "error", error: { type: "overloaded_error", message: "the model was unloaded mid-answer" } });
  });

  test("the official client raises the mid-stream error event as an APIError of its type", async () => {
    fail = "during";
    const stream = anthropicClient(f, { apiKey: fkey }).messages.stream({ model: "chat", max_tokens: 4, messages: hi });
    const err = await sdkError(stream.finalMessage());
    expect(err.type).toBe("overloaded_error");
  });

  test("an unexpected failure mid-stream names only the request id, and is logged", async () => {
    fail = "during";
    unexpected = true;
    const res = await f.request("POST", "/v1/messages", { key: fkey, body: { model: "chat", max_tokens: 4, stream: true, messages: hi } });
    const last = parseSse(await res.text()).at(-1)!;
    unexpected = false;
    expect(last.data.error.type).toBe("api_error");
    expect(last.data.error.message).toBe(`internal server error (request id ${res.headers.get("request-id")})`);
    expect(f.logs.some((l) => l.msg === "messages stream failed" && l.error === "segfault-ish")).toBe(true);
  });
});

let unexpected = false;

function failingChat(real: ChatService, when: () => "before" | "during"): ChatService {
  return {
    ...real,
    async start(): Promise<ChatRun> {
      if (when() === "before") throw new ApiError("model_unavailable", "the model is not loaded");
      const ids: CompletionIds = { id: "chatcmpl-fail", created: 1, model: "chat", toolCallId: (i) => `call_${i}` };
      return {
        job: {} as ChatRun["job"],
        ids,
        promptTokens: 5,
        cachedTokens: 0,
        stopSequence: () => null,
        settle: async () => {},
        release: async () => {},
        chunks: (async function* () {
          yield chunk(ids, { role: "assistant", content: "" });
          yield chunk(ids, { content: "Hel" });
          throw unexpected ? new Error("segfault-ish") : new ApiError("model_unavailable", "the model was unloaded mid-answer");
        })(),
      };
    },
  };
}
