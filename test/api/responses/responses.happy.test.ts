import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import type OpenAI from "openai";
import type { TestApp } from "../../helpers/app";
import { chatTestApp, forced } from "../../helpers/chat";
import { checkStream, parseSse } from "./invariants";

// The official openai client, unmodified, against the real app and the tiny generated models.

let t: TestApp & { openai: (key: string) => OpenAI };
let client: OpenAI;
let key: string;
beforeAll(async () => {
  t = await chatTestApp();
  key = await t.key({ creditUsd: 5 });
  client = t.openai(key);
});
afterAll(() => t.close());

type Params = OpenAI.Responses.ResponseCreateParamsNonStreaming;
setDefaultTimeout(30_000); // model calls share two cores with whatever else runs

const direct = { temperature: 0, reasoning: { effort: "low" } } as const; // thinking off: deterministic and short

async function events(params: Params): Promise<any[]> {
  const out: any[] = [];
  for await (const e of await client.responses.create({ ...params, stream: true })) out.push(e);
  return out;
}

describe("plain answers", () => {
  test("a non-streamed answer is one response object with a message item and usage, billed to /v1/responses", async () => {
    const { data: r, response } = await client.responses.create({ model: "chat", input: "Hello!", max_output_tokens: 12, ...direct }).withResponse();
    expect(r.object).toBe("response");
    expect(r.id).toMatch(/^resp_/);
    expect(r.model).toBe("chat");
    expect(["completed", "incomplete"]).toContain(r.status!);
    expect(r.output).toHaveLength(1);
    const msg = r.output[0] as OpenAI.Responses.ResponseOutputMessage;
    expect(msg).toMatchObject({ type: "message", role: "assistant" });
    expect(msg.id).toMatch(/^msg_/);
    expect(r.output_text).toBe((msg.content[0] as OpenAI.Responses.ResponseOutputText).text);
    expect(r.output_text.length).toBeGreaterThan(0);
    expect(r.usage!.input_tokens).toBeGreaterThan(5);
    expect(r.usage!.output_tokens).toBeGreaterThan(0);
    expect(r.usage!.output_tokens).toBeLessThanOrEqual(12);
    expect(r.usage!.total_tokens).toBe(r.usage!.input_tokens + r.usage!.output_tokens);
    expect(r.usage!.output_tokens_details.reasoning_tokens).toBe(0);
    const row = t.deps.db!.query("SELECT endpoint, input_tokens, output_tokens FROM usage WHERE request_id = ?").get(response.headers.get("x-request-id")!);
    expect(row).toEqual({ endpoint: "/v1/responses", input_tokens: r.usage!.input_tokens, output_tokens: r.usage!.output_tokens });
  });

  test("instructions and a history of every role reach the model; store and metadata are echoed", async () => {
    const plain = await client.responses.create({ model: "chat", input: "Go on.", max_output_tokens: 1, ...direct });
    const r = await client.responses.create({
      model: "chat",
      instructions: "You are terse.",
      store: true,
      metadata: { ticket: "42" },
      input: [
        { role: "developer", content: "Answer in English." },
        { role: "system", content: [{ type: "input_text", text: "No lists." }] },
        { role: "user", content: "Hi there." },
        { type: "message", role: "assistant", content: [{ type: "output_text", text: "Hello!", annotations: [] }] },
        { role: "user", content: [{ type: "input_text", text: "Go on." }] },
      ] as OpenAI.Responses.ResponseInput,
      max_output_tokens: 1,
      ...direct,
    });
    expect(r.usage!.input_tokens).toBeGreaterThan(plain.usage!.input_tokens + 15);
    expect([r.instructions, (r as any).store, r.metadata, r.previous_response_id]).toEqual(["You are terse.", true, { ticket: "42" }, null]);
  });

  test("max_output_tokens cuts the answer: status incomplete, reason max_output_tokens", async () => {
    const r = await client.responses.create({ model: "chat", input: `Story ${forced("Once upon a time there was a")}`, max_output_tokens: 3, ...direct });
    expect(r.status).toBe("incomplete");
    expect(r.incomplete_details).toEqual({ reason: "max_output_tokens" });
    expect(r.output_text).toBe("Once upon a");
    expect((r.output[0] as any).status).toBe("incomplete");
    expect(r.usage!.output_tokens).toBe(3);
  });
});

describe("streams", () => {
  const params: Params = { model: "chat", input: `Say it. ${forced("Streaming works")}`, max_output_tokens: 8, ...direct };

  test("a stream runs from response.created to its terminal event with rising sequence numbers; its text equals the non-streamed text", async () => {
    const whole = await client.responses.create(params);
    const all = await events(params);
    const { terminal } = checkStream(all);
    expect(terminal.type).toBe(whole.status === "completed" ? "response.completed" : "response.incomplete");
    const text = all.filter((e) => e.type === "response.output_text.delta").map((e) => e.delta).join("");
    expect(text).toBe(whole.output_text);
    expect(text.startsWith("Streaming works")).toBe(true);
    expect([terminal.response.usage.input_tokens, terminal.response.usage.output_tokens]).toEqual([whole.usage!.input_tokens, whole.usage!.output_tokens]);
    expect(new Set(all.filter((e) => e.item_id).map((e) => e.item_id)).size).toBe(1);
  });

  test("the raw stream is typed SSE: each event line names its data's type", async () => {
    const res = await t.request("POST", "/v1/responses", { key, body: { ...params, stream: true } });
    expect(res.headers.get("content-type")).toBe("text/event-stream; charset=utf-8");
    const all = parseSse(await res.text());
    checkStream(all);
    expect(all.map((e) => e.type).slice(0, 4)).toEqual(["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]);
  });

  test("the SDK's responses.stream helper accepts the events and its final response matches the non-streamed one", async () => {
    const whole = await client.responses.create(params);
    const stream = client.responses.stream({ ...params, stream: true });
    let deltas = "";
    stream.on("response.output_text.delta", (e) => (deltas += e.delta));
    const final = await stream.finalResponse();
    expect(final.output_text).toBe(whole.output_text);
    expect(deltas).toBe(whole.output_text);
    expect(final.status).toBe(whole.status);
  });
});

describe("tools", () => {
  const tools: OpenAI.Responses.FunctionTool[] = [
    { type: "function", name: "get_weather", description: "Weather for a city", strict: true, parameters: { type: "object", properties: { city: { type: "string", maxLength: 12 }, unit: { enum: ["c", "f"] } }, required: ["city", "unit"], additionalProperties: false } },
    { type: "function", name: "get_time", strict: true, parameters: { type: "object", properties: { zone: { enum: ["utc", "local"] } }, required: ["zone"], additionalProperties: false } },
  ];
  const first: Params = { model: "chat", tools, tool_choice: { type: "function", name: "get_weather" }, parallel_tool_calls: false, max_output_tokens: 300, temperature: 0, input: "Weather in Oslo?" };

  test("a forced function call comes back as a function_call item, and a tool loop resending it continues", async () => {
    const r = await client.responses.create(first);
    expect(r.status).toBe("completed");
    expect(r.output).toHaveLength(1);
    const call = r.output[0] as OpenAI.Responses.ResponseFunctionToolCall;
    expect(call).toMatchObject({ type: "function_call", name: "get_weather", status: "completed" });
    expect(call.id).toMatch(/^fc_/);
    expect(call.call_id).toMatch(/^call_/);
    expect(["c", "f"]).toContain(JSON.parse(call.arguments).unit);
    expect(r.tools).toEqual(tools.map((tool) => ({ description: null, ...tool })) as any);
    expect(r.tool_choice).toEqual({ type: "function", name: "get_weather" });

    // Stateless: the client resends the model's own items (and a reasoning item, ignored) with the result.
    const next = await client.responses.create({
      model: "chat",
      tools,
      max_output_tokens: 4,
      ...direct,
      input: [{ role: "user", content: "Weather in Oslo?" }, { type: "reasoning", id: "rs_1", summary: [] }, ...r.output, { type: "function_call_output", call_id: call.call_id, output: '{"temp": 3}' }] as OpenAI.Responses.ResponseInput,
    });
    expect(next.usage!.input_tokens).toBeGreaterThan(r.usage!.input_tokens);
    expect(next.output[0]!.type).toBe("message");
  });

  test("streamed parallel calls are one function_call item each, arguments in deltas", async () => {
    const all = await events({ ...first, tool_choice: "required", parallel_tool_calls: true, max_output_tokens: 400, input: "Call tools." });
    const { terminal, items } = checkStream(all);
    expect(items.length).toBeGreaterThanOrEqual(2);
    expect(items.every((i) => i.type === "function_call")).toBe(true);
    expect(new Set(items.map((i) => i.call_id)).size).toBe(items.length);
    expect(all.some((e) => e.type === "response.function_call_arguments.delta")).toBe(true);
    for (const i of items.filter((i) => i.status === "completed")) expect(typeof JSON.parse(i.arguments)).toBe("object");
    expect(["response.completed", "response.incomplete"]).toContain(terminal.type);
  });
});

describe("structured output and reasoning", () => {
  const schema = { type: "object", properties: { mood: { enum: ["happy", "sad", "calm"] }, ok: { type: "boolean" } }, required: ["mood", "ok"], additionalProperties: false };
  const params: Params = { model: "chat", input: "How do you feel?", max_output_tokens: 40, temperature: 0, text: { format: { type: "json_schema", name: "mood", schema, strict: true } } };

  test("json_schema output parses and validates against the schema", async () => {
    const r = await client.responses.create({ ...params, reasoning: { effort: "low" } });
    expect(r.status).toBe("completed");
    const out = JSON.parse(r.output_text);
    expect(Object.keys(out).sort()).toEqual(["mood", "ok"]);
    expect(["happy", "sad", "calm"]).toContain(out.mood);
    expect(typeof out.ok).toBe("boolean");
    expect(r.text!.format).toEqual(params.text!.format!);
  });

  test("reasoning effort low spends no reasoning tokens; medium spends them inside output_tokens", async () => {
    const low = await client.responses.create({ ...params, reasoning: { effort: "low" } });
    const reference = await client.chat.completions.create({
      model: "chat", messages: [{ role: "user", content: "How do you feel?" }], max_tokens: 40, temperature: 0,
      response_format: { type: "json_schema", json_schema: { name: "mood", schema } }, chat_template_kwargs: { enable_thinking: false },
    } as any);
    expect(reference.usage!.completion_tokens_details!.reasoning_tokens).toBe(0);
    expect(low.usage!.output_tokens).toBe(reference.usage!.completion_tokens);
    expect(low.output_text).toBe(reference.choices[0]!.message.content!);

    // Thinking on: the reasoning pass runs first and its tokens count as output, never shown.
    const medium = await client.responses.create({ ...params, reasoning: { effort: "medium" } });
    expect(medium.usage!.output_tokens).toBeGreaterThan(low.usage!.output_tokens);
    expect(medium.usage!.output_tokens_details.reasoning_tokens).toBe(0);
    expect(medium.reasoning).toEqual({ effort: "medium", summary: null });
  });
});

describe("what OpenAI's clients send by default (Codex, the AI SDK)", () => {
  const thinkFirst = `Think first. ${forced("<think>\nThe user wants a greeting.\n</think>\n\nHi")}`;
  const asks = {
    include: ["reasoning.encrypted_content"],
    reasoning: { effort: "medium", summary: "auto" },
    store: false,
    prompt_cache_key: "session-1",
    safety_identifier: "user-1",
    service_tier: "auto",
    text: { verbosity: "low" },
    client_metadata: { originator: "codex_exec" },
  } as Record<string, unknown>;

  test("include + reasoning.summary: a reasoning item with the thought as summary and encrypted_content; sent back next turn, it is accepted", async () => {
    const first = await client.responses.create({ model: "chat", input: thinkFirst, max_output_tokens: 30, temperature: 0, ...asks } as any);
    expect(first.status).toMatch(/completed|incomplete/); // the tiny model may run on after "Hi"
    const reasoning = first.output[0] as OpenAI.Responses.ResponseReasoningItem;
    expect(reasoning.type).toBe("reasoning");
    expect(reasoning.summary).toEqual([{ type: "summary_text", text: expect.stringContaining("The user wants a greeting.") }]);
    expect(typeof reasoning.encrypted_content).toBe("string");
    expect(first.output[1]!.type).toBe("message");
    expect(first.reasoning).toEqual({ effort: "medium", summary: "auto" });
    expect(first.usage!.output_tokens_details.reasoning_tokens).toBeGreaterThan(3);

    // The next turn hands the whole output back (store: false), as Codex does.
    const next = await client.responses.create({
      model: "chat",
      input: [{ role: "user", content: thinkFirst }, ...(first.output as any[]), { role: "user", content: "And again?" }],
      max_output_tokens: 10,
      temperature: 0,
      ...asks,
    } as any);
    expect(next.status).toMatch(/completed|incomplete/);
  });

  test("streamed: the SDK's stream helper sees the reasoning summary events and the item done with encrypted_content", async () => {
    const all = await events({ model: "chat", input: thinkFirst, max_output_tokens: 30, temperature: 0, ...asks } as any);
    checkStream(all);
    const types = all.map((e) => e.type);
    expect(types).toContain("response.reasoning_summary_part.added");
    expect(types).toContain("response.reasoning_summary_text.delta");
    const done = all.find((e) => e.type === "response.output_item.done" && e.item.type === "reasoning");
    expect(done.item.encrypted_content).toEqual(expect.any(String));
    const deltas = all.filter((e) => e.type === "response.reasoning_summary_text.delta").map((e) => e.delta).join("");
    expect(done.item.summary[0].text).toBe(deltas);
  });

  test("a namespace tool group is offered; a forced call comes back with its name and namespace", async () => {
    const r = await client.responses.create({
      model: "chat",
      input: "Search the docs.",
      max_output_tokens: 60,
      ...direct,
      tools: [{ type: "namespace", name: "mcp__docs__", description: "Docs", tools: [{ type: "function", name: "search", parameters: { type: "object", properties: { q: { type: "string", maxLength: 5 } }, required: ["q"] } }] }],
      tool_choice: { type: "function", name: "search", namespace: "mcp__docs__" },
    } as any);
    const call = r.output.find((o) => o.type === "function_call") as any;
    expect(call).toMatchObject({ name: "search", namespace: "mcp__docs__" });
    expect(r.tools[0]).toMatchObject({ type: "namespace", name: "mcp__docs__" });
  });
});

describe("the client request fixtures (test/fixtures/requests) against the app", () => {
  const load = (name: string) => JSON.parse(require("node:fs").readFileSync(require("node:path").join(import.meta.dir, "../../fixtures/requests", name), "utf8"));

  test("a Codex-like request streams to a completed (or capped) response; the thought leads, with encrypted_content", async () => {
    const all = await events({ ...load("responses-codex.json"), max_output_tokens: 40 });
    const { terminal, items } = checkStream(all);
    expect(["response.completed", "response.incomplete"]).toContain(terminal.type);
    for (const item of items.filter((i) => i.type === "reasoning")) expect(item.encrypted_content).toEqual(expect.any(String));
    expect(terminal.response.tools.map((x: any) => x.name)).toEqual(["shell", "update_plan", "mcp__docs__"]);
  });

  test("an AI-SDK-like request (structured output, zod-style schema, reasoning summary, include) answers", async () => {
    const r = await client.responses.create(load("responses-ai-sdk.json"));
    expect(r.status).toMatch(/^(completed|incomplete)$/);
    if (r.status === "completed") expect(() => JSON.parse(r.output_text)).not.toThrow();
  });
});
