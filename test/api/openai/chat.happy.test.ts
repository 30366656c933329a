import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type OpenAI from "openai";
import { chatTestApp, forced } from "../../helpers/chat";
import type { TestApp } from "../../helpers/app";

let t: TestApp & { openai: (key: string) => OpenAI };
let client: OpenAI;
beforeAll(async () => {
  t = await chatTestApp();
  client = t.openai(await t.key({ creditUsd: 5 }));
});
afterAll(() => t.close());

const user = (content: string) => [{ role: "user" as const, content }];

describe("plain answers", () => {
  test("a non-streamed answer is one chat.completion with usage", async () => {
    const r = await client.chat.completions.create({ model: "chat", messages: user("Hello!"), max_tokens: 12, temperature: 0 });
    expect(r.object).toBe("chat.completion");
    expect(r.id).toMatch(/^chatcmpl-/);
    expect(r.model).toBe("chat");
    expect(r.choices).toHaveLength(1);
    expect(typeof r.choices[0]!.message.content).toBe("string");
    expect(r.choices[0]!.message.role).toBe("assistant");
    expect(["stop", "length"]).toContain(r.choices[0]!.finish_reason);
    expect(r.usage!.prompt_tokens).toBeGreaterThan(5);
    expect(r.usage!.completion_tokens).toBeGreaterThan(0);
    expect(r.usage!.completion_tokens).toBeLessThanOrEqual(12);
    expect(r.usage!.total_tokens).toBe(r.usage!.prompt_tokens + r.usage!.completion_tokens);
  });

  test("max_tokens cuts the answer with finish_reason length", async () => {
    const r = await client.chat.completions.create({ model: "chat", messages: user("Tell me a long story."), max_tokens: 7, temperature: 0, chat_template_kwargs: { enable_thinking: false } } as any);
    expect(r.choices[0]!.finish_reason).toBe("length");
    expect(r.usage!.completion_tokens).toBe(7);
  });

  test("a stream ends with a usage chunk and [DONE], and its text equals the non-streamed text", async () => {
    const params = { model: "chat", messages: user("Stream this please."), max_tokens: 16, temperature: 0, seed: 7, chat_template_kwargs: { enable_thinking: false } } as any;
    const whole = await client.chat.completions.create(params);
    const stream = (await client.chat.completions.create({ ...params, stream: true })) as unknown as AsyncIterable<OpenAI.ChatCompletionChunk>;
    let text = "";
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | undefined;
    const ids = new Set<string>();
    for await (const c of stream) {
      ids.add(c.id);
      if (c.usage) usage = c.usage;
      for (const ch of c.choices) {
        text += ch.delta.content ?? "";
        finish = ch.finish_reason ?? finish;
      }
    }
    expect(ids.size).toBe(1);
    expect(text).toBe(whole.choices[0]!.message.content!);
    expect(finish).toBe(whole.choices[0]!.finish_reason);
    expect(usage!.completion_tokens).toBe(whole.usage!.completion_tokens);
    expect(usage!.prompt_tokens).toBe(whole.usage!.prompt_tokens);
  });

  test("the raw stream is SSE ending in data: [DONE]", async () => {
    const key = await t.key({ creditUsd: 1 });
    const res = await t.request("POST", "/v1/chat/completions", { key, body: { model: "chat", messages: user("hi"), max_tokens: 3, stream: true } });
    expect(res.headers.get("content-type")).toBe("text/event-stream; charset=utf-8");
    const body = await res.text();
    const events = body.trim().split("\n\n");
    expect(events.at(-1)).toBe("data: [DONE]");
    const last = JSON.parse(events.at(-2)!.slice(6));
    expect(last.choices).toEqual([]);
    expect(last.usage.total_tokens).toBeGreaterThan(0);
  });

  test("stream_options.include_usage false leaves the usage chunk out", async () => {
    const stream = await client.chat.completions.create({ model: "chat", messages: user("hi"), max_tokens: 3, stream: true, stream_options: { include_usage: false } });
    for await (const c of stream) expect(c.usage ?? null).toBeNull();
  });

  test("a repeated prompt reuses the slot's cached prefix and says so", async () => {
    const params = { model: "chat", messages: user("Same prompt twice, with enough words to cache."), max_tokens: 2, temperature: 0, chat_template_kwargs: { enable_thinking: false } } as any;
    await client.chat.completions.create(params);
    const again = await client.chat.completions.create(params);
    expect(again.usage!.prompt_tokens_details!.cached_tokens).toBe(again.usage!.prompt_tokens - 1);
  });
});

describe("tools", () => {
  const tools: OpenAI.ChatCompletionTool[] = [
    { type: "function", function: { name: "get_weather", description: "Weather for a city", parameters: { type: "object", properties: { city: { type: "string", maxLength: 12 }, unit: { enum: ["c", "f"] } }, required: ["city", "unit"], additionalProperties: false } } },
    { type: "function", function: { name: "get_time", parameters: { type: "object", properties: { zone: { enum: ["utc", "local"] } }, required: ["zone"] } } },
  ];

  function checkCall(r: OpenAI.ChatCompletion, name?: string) {
    const choice = r.choices[0]!;
    expect(choice.finish_reason).toBe("tool_calls");
    const calls = choice.message.tool_calls!;
    expect(calls.length).toBeGreaterThanOrEqual(1);
    for (const c of calls) {
      expect(c.id).toMatch(/^call_/);
      expect(c.type).toBe("function");
      const args = JSON.parse((c as any).function.arguments);
      expect(typeof args).toBe("object");
      if ((c as any).function.name === "get_weather") expect(["c", "f"]).toContain(args.unit);
    }
    if (name) expect((calls[0] as any).function.name).toBe(name);
    expect(new Set(calls.map((c) => c.id)).size).toBe(calls.length);
    return calls;
  }

  test("auto: a tool call the model makes comes back as tool_calls", async () => {
    const r = await client.chat.completions.create({ model: "chat", tools, parallel_tool_calls: false, max_tokens: 60, temperature: 0, messages: user(`Weather? ${forced('<tool_call>\n{"name": "get_weather", "arguments": ')}`) });
    checkCall(r, "get_weather");
  });

  test("required: the server makes the model call a tool", async () => {
    const r = await client.chat.completions.create({ model: "chat", tools, tool_choice: "required", parallel_tool_calls: false, max_tokens: 300, temperature: 0, messages: user("Do something.") });
    checkCall(r);
  });

  test("a named function is the one called", async () => {
    const r = await client.chat.completions.create({ model: "chat", tools, tool_choice: { type: "function", function: { name: "get_time" } }, parallel_tool_calls: false, max_tokens: 60, temperature: 0, messages: user("What time is it?") });
    const [call] = checkCall(r, "get_time");
    expect(["utc", "local"]).toContain(JSON.parse((call as any).function.arguments).zone);
  });

  test("tools beside a response_format (an agent's tools and output type): a call is a call, an answer is under the schema", async () => {
    const response_format = { type: "json_schema" as const, json_schema: { name: "out", strict: true, schema: { type: "object", properties: { mood: { enum: ["ok", "bad"] } }, required: ["mood"], additionalProperties: false } } };
    const called = await client.chat.completions.create({ model: "chat", tools, tool_choice: "required", parallel_tool_calls: false, response_format, max_tokens: 80, temperature: 0, messages: user("Do something.") });
    expect(called.choices[0]!.finish_reason).toBe("tool_calls");
    const stops: unknown[] = [];
    for (const seed of [1, 2, 3, 4]) {
      const r = await client.chat.completions.create({ model: "chat", tools, response_format, max_tokens: 200, temperature: 1, seed, messages: user("How are you?"), chat_template_kwargs: { enable_thinking: false } } as any);
      const choice = r.choices[0]!;
      expect(["stop", "tool_calls", "length"]).toContain(choice.finish_reason);
      if (choice.finish_reason === "stop") stops.push(JSON.parse(choice.message.content!));
    }
    expect(stops.length).toBeGreaterThan(0); // free text is not the answer: it came back under the schema
    for (const o of stops) expect(["ok", "bad"]).toContain((o as { mood: string }).mood);
  });

  test.each(["__proto__", "constructor"])("a tool named %s is a tool like any other", async (name) => {
    const own = [{ type: "function" as const, function: { name, parameters: { type: "object", properties: { x: { type: "integer" } }, required: ["x"] } } }];
    const r = await client.chat.completions.create({ model: "chat", tools: own, tool_choice: { type: "function", function: { name } }, parallel_tool_calls: false, max_tokens: 60, temperature: 0, messages: user("Go.") });
    expect(r.choices[0]!.message.tool_calls?.[0]).toMatchObject({ type: "function", function: { name } });
  });

  test("none: no tool is called even when the model is pushed to", async () => {
    const r = await client.chat.completions.create({ model: "chat", tools, tool_choice: "none", max_tokens: 10, temperature: 0, messages: user(`Hi ${forced("<tool_call>")}`) });
    expect(r.choices[0]!.message.tool_calls ?? []).toEqual([]);
    expect(r.choices[0]!.finish_reason).not.toBe("tool_calls");
  });

  async function streamCalls(params: Record<string, unknown>) {
    const stream = await client.chat.completions.create({ model: "chat", tools, temperature: 0, stream: true, stream_options: { include_usage: true }, messages: user("Call tools."), ...params } as any);
    const calls: { id?: string; name?: string; args: string }[] = [];
    let finish: string | null = null;
    let completionTokens = 0;
    for await (const c of stream as any) {
      completionTokens = c.usage?.completion_tokens ?? completionTokens;
      for (const ch of c.choices) {
        finish = ch.finish_reason ?? finish;
        for (const d of ch.delta.tool_calls ?? []) {
          const call = (calls[d.index] ??= { args: "" });
          if (d.id) {
            expect(call.id).toBeUndefined(); // the id comes once, on the call's first delta
            call.id = d.id;
            call.name = d.function?.name;
          }
          call.args += d.function?.arguments ?? "";
        }
      }
    }
    return { calls, finish, completionTokens };
  }

  test("a streamed tool call carries its id once and its arguments in deltas", async () => {
    const { calls, finish } = await streamCalls({ tool_choice: "required", parallel_tool_calls: false, max_tokens: 80 });
    expect(finish).toBe("tool_calls");
    expect(calls).toHaveLength(1);
    expect(calls[0]!.id).toMatch(/^call_/);
    expect(["get_weather", "get_time"]).toContain(calls[0]!.name!);
    expect(calls[0]!.args.endsWith("}")).toBe(true);
    expect(typeof JSON.parse(calls[0]!.args)).toBe("object");
  });

  test("parallel streamed tool calls get distinct indexes and ids; a max_tokens cut is finish_reason length", async () => {
    const { calls, finish, completionTokens } = await streamCalls({ tool_choice: "required", max_tokens: 400 });
    expect(calls.length).toBeGreaterThanOrEqual(2);
    expect(calls.every((c) => c !== undefined)).toBe(true); // indexes 0..n-1, none skipped
    expect(new Set(calls.map((c) => c.id)).size).toBe(calls.length);
    for (const c of calls.slice(0, -1)) expect(typeof JSON.parse(c.args)).toBe("object");
    // The last call was cut by max_tokens (its arguments may or may not have closed before the
    // call's own end): length exactly when the whole budget went.
    if (finish === "length") expect(completionTokens).toBe(400);
    else expect(finish).toBe("tool_calls");
  });

  test("a conversation with a tool result continues to an answer", async () => {
    const r = await client.chat.completions.create({
      model: "chat",
      tools,
      max_tokens: 8,
      temperature: 0,
      chat_template_kwargs: { enable_thinking: false },
      messages: [
        { role: "user", content: "Weather in Oslo?" },
        { role: "assistant", content: null, tool_calls: [{ id: "call_a", type: "function", function: { name: "get_weather", arguments: '{"city":"Oslo","unit":"c"}' } }] },
        { role: "tool", tool_call_id: "call_a", content: '{"temp": 3}' },
      ],
    } as any);
    expect(r.choices[0]!.message.role).toBe("assistant");
    expect(r.usage!.prompt_tokens).toBeGreaterThan(20);
  });
});

describe("structured output", () => {
  const schema = {
    type: "object",
    properties: {
      mood: { enum: ["happy", "sad", "calm"] },
      ok: { type: "boolean" },
      tags: { type: "array", items: { type: "string", maxLength: 6 }, minItems: 1, maxItems: 2 },
    },
    required: ["mood", "ok", "tags"],
    additionalProperties: false,
  };

  test("json_schema output parses and validates against the schema", async () => {
    const r = await client.chat.completions.create({
      model: "chat",
      max_tokens: 80,
      temperature: 0,
      chat_template_kwargs: { enable_thinking: false },
      response_format: { type: "json_schema", json_schema: { name: "mood", schema } },
      messages: user("How do you feel?"),
    } as any);
    expect(r.choices[0]!.finish_reason).toBe("stop");
    const out = JSON.parse(r.choices[0]!.message.content!);
    expect(Object.keys(out).sort()).toEqual(["mood", "ok", "tags"]);
    expect(["happy", "sad", "calm"]).toContain(out.mood);
    expect(typeof out.ok).toBe("boolean");
    expect(out.tags.length).toBeGreaterThanOrEqual(1);
    expect(out.tags.length).toBeLessThanOrEqual(2);
    for (const tag of out.tags) expect(tag.length).toBeLessThanOrEqual(6);
  });

  test("thinking and json_schema compose: the schema applies to the answer after the reasoning", async () => {
    const r = await client.chat.completions.create({
      model: "chat",
      max_tokens: 120,
      temperature: 0,
      response_format: { type: "json_schema", json_schema: { name: "mood", schema } },
      messages: user(`How do you feel? ${forced("<think>\nI should pick a mood.\n</think>")}`),
    } as any);
    expect(r.choices[0]!.finish_reason).toBe("stop");
    const content = r.choices[0]!.message.content!;
    expect(content).not.toContain("pick a mood");
    const out = JSON.parse(content);
    expect(["happy", "sad", "calm"]).toContain(out.mood);
    expect(r.usage!.completion_tokens_details!.reasoning_tokens).toBeGreaterThan(3);
    expect(r.usage!.completion_tokens).toBeGreaterThan(r.usage!.completion_tokens_details!.reasoning_tokens!);
  });

  test("a reasoning pass cut by max_tokens counts its tokens as reasoning and returns no JSON", async () => {
    const r = await client.chat.completions.create({ model: "chat", max_tokens: 40, temperature: 0, response_format: { type: "json_schema", json_schema: { name: "mood", schema } }, messages: user("How do you feel?") } as any);
    expect(r.choices[0]!.finish_reason).toBe("length");
    expect(r.choices[0]!.message.content).toBe("");
    expect(r.usage!.completion_tokens).toBe(40);
    expect(r.usage!.completion_tokens_details!.reasoning_tokens).toBeGreaterThan(30);
  });

  test("json_object output is JSON", async () => {
    const r = await client.chat.completions.create({ model: "chat", max_tokens: 40, temperature: 0, response_format: { type: "json_object" }, chat_template_kwargs: { enable_thinking: false }, messages: user("JSON please") } as any);
    if (r.choices[0]!.finish_reason === "stop") expect(() => JSON.parse(r.choices[0]!.message.content!)).not.toThrow();
    else expect(r.choices[0]!.finish_reason).toBe("length");
  });

  test("a max_tokens cut leaves incomplete JSON and finish_reason length", async () => {
    const r = await client.chat.completions.create({ model: "chat", max_tokens: 3, temperature: 0, chat_template_kwargs: { enable_thinking: false }, response_format: { type: "json_schema", json_schema: { name: "mood", schema } }, messages: user("How do you feel?") } as any);
    expect(r.choices[0]!.finish_reason).toBe("length");
    expect(() => JSON.parse(r.choices[0]!.message.content!)).toThrow();
  });
});

describe("thinking", () => {
  test("reasoning stays out of content, and its tokens are counted as completion tokens", async () => {
    const r = await client.chat.completions.create({ model: "chat", max_tokens: 30, temperature: 0, messages: user(`Think first. ${forced("<think>\nLet me think about it carefully.\n</think>\n\nDone")}`) });
    const content = r.choices[0]!.message.content!;
    expect(content).not.toContain("think about it");
    expect(content).not.toContain("<think>");
    const reasoning = r.usage!.completion_tokens_details!.reasoning_tokens!;
    expect(reasoning).toBeGreaterThan(5);
    expect(r.usage!.completion_tokens).toBeGreaterThan(reasoning);
  });

  test("enable_thinking false leaves no reasoning tokens", async () => {
    const r = await client.chat.completions.create({ model: "chat", max_tokens: 10, temperature: 0, chat_template_kwargs: { enable_thinking: false }, messages: user("Answer directly.") } as any);
    expect(r.usage!.completion_tokens_details!.reasoning_tokens).toBe(0);
  });
  test("reasoning_effort none (with the fields clients send by default) leaves no reasoning tokens; high thinks", async () => {
    const extra = { verbosity: "low", prompt_cache_key: "session-1", safety_identifier: "user-1", service_tier: "auto", store: false, metadata: { app: "t" } };
    const off = await client.chat.completions.create({ model: "chat", max_tokens: 10, temperature: 0, reasoning_effort: "none", ...extra, messages: user("Answer directly.") } as any);
    expect(off.usage!.completion_tokens_details!.reasoning_tokens).toBe(0);
    const on = await client.chat.completions.create({ model: "chat", max_tokens: 10, temperature: 0, reasoning_effort: "high", messages: user(`Think first. ${forced("<think>\nLet me think.\n</think>\n\nDone")}`) } as any);
    expect(on.usage!.completion_tokens_details!.reasoning_tokens).toBeGreaterThan(0);
  });

  test('reasoning_format "deepseek" returns the reasoning as reasoning_content, whole and streamed; "none" and absent keep it hidden; another value is a 400 naming it', async () => {
    const ask = (o: Record<string, unknown>) => ({ model: "chat", max_tokens: 30, temperature: 0, messages: user(`Think first. ${forced("<think>\nLet me think about it carefully.\n</think>\n\nDone")}`), ...o }) as any;
    const whole = await client.chat.completions.create(ask({ reasoning_format: "deepseek" }));
    const msg = whole.choices[0]!.message as any;
    expect(msg.reasoning_content).toContain("Let me think about it carefully.");
    expect(msg.content).not.toContain("think about it");
    let streamed = "";
    let content = "";
    for await (const c of await client.chat.completions.create({ ...ask({ reasoning_format: "deepseek" }), stream: true } as OpenAI.ChatCompletionCreateParamsStreaming)) {
      streamed += (c.choices[0]?.delta as any)?.reasoning_content ?? "";
      content += c.choices[0]?.delta?.content ?? "";
    }
    expect(streamed).toBe(msg.reasoning_content);
    expect(content).toBe(msg.content);
    for (const o of [{}, { reasoning_format: "none" }]) expect((await client.chat.completions.create(ask(o))).choices[0]!.message).not.toHaveProperty("reasoning_content");
    const bad = await client.chat.completions.create(ask({ reasoning_format: "parsed" })).catch((e) => e);
    expect([bad.status, bad.param ?? bad.error?.param]).toEqual([400, "reasoning_format"]);
  });
});
