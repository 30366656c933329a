import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { encodeSse } from "../../../src/1-api/http/sse";
import type { ResponseContext } from "../../../src/1-api/responses/from-chat";
import type { ResponsesRequest } from "../../../src/1-api/responses/schema";
import { createResponsesStream, type ResponseEvent } from "../../../src/1-api/responses/stream";
import { decodeThought } from "../../../src/1-api/responses/reasoning";
import { toChatRequest } from "../../../src/1-api/responses/to-chat";
import type { ChatCompletionChunk } from "../../../src/2-services/chat/completion";
import { checkStream, parseSse } from "./invariants";

// Golden transcripts: canonical chat chunks (test/fixtures/responses/*.jsonl, recorded from the
// tiny models and trimmed by hand; a line {"error":…} stands for a failure at that point) and
// the exact SSE bytes they must become (*.sse). UPDATE_GOLDEN=1 rewrites the .sse files; review
// the diff before committing it.

const DIR = join(import.meta.dir, "../../fixtures/responses");
const UPDATE = process.env.UPDATE_GOLDEN === "1";

const request = {
  model: "chat",
  instructions: "Be brief.",
  input: "Hi",
  temperature: 0,
  max_output_tokens: 120,
  tools: [
    { type: "function", name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" }, unit: { enum: ["c", "f"] } } } },
    { type: "function", name: "get_time", parameters: { type: "object", properties: { zone: { enum: ["utc", "local"] } } } },
  ],
} as ResponsesRequest;

function fixedContext(req: ResponsesRequest = request): ResponseContext {
  return { id: "resp_fixture", createdAt: 1700000000, model: "chat", echo: toChatRequest(req).echo, itemId: (kind, i) => `${kind}_fixture${i}` };
}

type Line = ChatCompletionChunk | { error: { code: string | null; message: string; param: string | null } };

function run(lines: Line[], ctx = fixedContext()): ResponseEvent[] {
  const s = createResponsesStream(ctx);
  const events = s.start();
  for (const line of lines) {
    if ("error" in line) return [...events, ...s.fail(line.error)];
    events.push(...s.push(line));
  }
  return [...events, ...s.finish()];
}

const load = (name: string): Line[] =>
  readFileSync(join(DIR, `${name}.jsonl`), "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));

const sseOf = (events: ResponseEvent[]) => events.map((e) => encodeSse({ event: e.type, data: e })).join("");

const fixtures = readdirSync(DIR)
  .filter((f) => f.endsWith(".jsonl"))
  .map((f) => f.slice(0, -6))
  .sort();

describe("golden transcripts", () => {
  test("every scenario has a fixture", () => {
    expect(fixtures).toEqual(["max-tokens", "mid-stream-error", "parallel-tool-calls", "text", "thinking", "tool-after-text", "tool-call-cut"]);
  });

  for (const name of fixtures) {
    test(`${name}: the chunks become exactly the golden SSE bytes, and the stream keeps every invariant`, () => {
      const sse = sseOf(run(load(name)));
      const golden = join(DIR, `${name}.sse`);
      if (UPDATE) writeFileSync(golden, sse);
      expect(sse).toBe(readFileSync(golden, "utf8"));
      checkStream(parseSse(sse));
    });
  }
});

describe("what the transcripts say", () => {
  const events = (name: string) => checkStream(run(load(name)));
  const types = (name: string) => run(load(name)).map((e) => e.type);

  test("a text answer is one message item, completed", () => {
    const { terminal, items } = events("text");
    expect(terminal.type).toBe("response.completed");
    expect(items).toEqual([{ type: "message", id: "msg_fixture0", status: "completed", role: "assistant", content: [{ type: "output_text", text: "Hello there! How can I help? ", annotations: [] }] }]);
    expect(terminal.response.usage).toEqual({ input_tokens: 33, input_tokens_details: { cached_tokens: 0 }, output_tokens: 12, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 45 });
  });

  test("reasoning deltas never become events; the answer keeps its leading blank line; reasoning tokens read 0", () => {
    const sse = sseOf(run(load("thinking")));
    expect(sse).not.toContain("greets");
    expect(sse).not.toContain("reasoning_content");
    const { terminal, items } = events("thinking");
    expect(items.map((i) => i.content[0].text)).toEqual(["\n\nHello! "]);
    expect(terminal.response.usage.output_tokens).toBe(18);
    expect(terminal.response.usage.output_tokens_details.reasoning_tokens).toBe(0);
  });

  test("a tool call after text opens a second item with its own output_index", () => {
    const { items } = events("tool-after-text");
    expect(items.map((i) => [i.type, i.id])).toEqual([["message", "msg_fixture0"], ["function_call", "fc_fixture1"]]);
    expect(items[1]).toMatchObject({ call_id: "call_fixture0", name: "get_weather", status: "completed" });
    expect(JSON.parse(items[1].arguments)).toEqual({ city: "} sayalkedim", unit: "f" });
  });

  test("parallel tool calls are one function_call item each, the first done before the second is added", () => {
    const { terminal, items } = events("parallel-tool-calls");
    expect(terminal.type).toBe("response.completed");
    expect(items.map((i) => [i.id, i.call_id, i.name])).toEqual([["fc_fixture0", "call_fixture0", "get_time"], ["fc_fixture1", "call_fixture1", "get_weather"]]);
    const t = types("parallel-tool-calls");
    expect(t.indexOf("response.output_item.done")).toBeLessThan(t.lastIndexOf("response.output_item.added"));
  });

  test("a max-token cut ends with response.incomplete, reason max_output_tokens, the cut item incomplete", () => {
    const { terminal, items } = events("max-tokens");
    expect(terminal.type).toBe("response.incomplete");
    expect(terminal.response.status).toBe("incomplete");
    expect(terminal.response.incomplete_details).toEqual({ reason: "max_output_tokens" });
    expect(items.map((i) => i.status)).toEqual(["incomplete"]);
  });

  test("a cut inside a parallel call leaves the finished call completed and the cut one incomplete", () => {
    const { items } = events("tool-call-cut");
    expect(items.map((i) => i.status)).toEqual(["completed", "incomplete"]);
    expect(() => JSON.parse(items[1].arguments)).toThrow();
  });

  test("a failure mid-stream is one error event, last, with no terminal response", () => {
    const all = run(load("mid-stream-error"));
    expect(all.at(-1)).toEqual({ type: "error", sequence_number: all.length - 1, code: "internal_error", message: "internal server error (request id req_fixture)", param: null });
    expect(all.some((e) => e.type === "response.completed" || e.type === "response.incomplete")).toBe(false);
  });
});

describe("the thought, when asked for (reasoning.summary, include reasoning.encrypted_content)", () => {
  const withReasoning = (fields: Record<string, unknown>) => {
    const t = toChatRequest({ ...request, ...fields } as ResponsesRequest);
    return { ...fixedContext(), echo: t.echo, output: t.output };
  };
  const thought = () => load("thinking").flatMap((l) => ("choices" in l ? l.choices.map((c) => c.delta.reasoning_content ?? "") : [])).join("");

  test("summary: a reasoning item first, streamed with OpenAI's summary events, its text the thought; reasoning tokens reported", () => {
    const events = run(load("thinking"), withReasoning({ reasoning: { summary: "auto" } }));
    const { terminal, items } = checkStream(events);
    expect(items.map((i) => [i.type, i.id])).toEqual([["reasoning", "rs_fixture0"], ["message", "msg_fixture1"]]);
    expect(items[0]).toEqual({ type: "reasoning", id: "rs_fixture0", status: "completed", summary: [{ type: "summary_text", text: thought() }] });
    expect(thought().length).toBeGreaterThan(10);
    const types = events.map((e) => e.type);
    expect(types.slice(2, 5)).toEqual(["response.output_item.added", "response.reasoning_summary_part.added", "response.reasoning_summary_text.delta"]);
    expect(types).toContain("response.reasoning_summary_text.done");
    expect(types).toContain("response.reasoning_summary_part.done");
    expect(terminal.response.usage.output_tokens_details.reasoning_tokens).toBeGreaterThan(0);
    expect(terminal.response.reasoning).toEqual({ effort: null, summary: "auto" });
  });

  test("include only: the item carries encrypted_content (which decodes to the thought) and an empty summary, with no summary events", () => {
    const events = run(load("thinking"), withReasoning({ include: ["reasoning.encrypted_content"] }));
    const { items } = checkStream(events);
    expect(items[0]).toMatchObject({ type: "reasoning", summary: [] });
    expect(decodeThought(items[0].encrypted_content)).toBe(thought());
    expect(events.some((e) => e.type.startsWith("response.reasoning_summary"))).toBe(false);
    // the item as added is not yet complete: no content to carry
    expect(events.find((e) => e.type === "response.output_item.added")).toMatchObject({ item: { type: "reasoning", summary: [] } });
  });

  test("a namespaced call is given back as its name and namespace", () => {
    const ctx = withReasoning({ tools: [{ type: "namespace", name: "mcp__docs__", tools: [{ type: "function", name: "search" }] }] });
    const ids = { id: "chatcmpl-x", object: "chat.completion.chunk" as const, created: 1, model: "chat" };
    const events = run(
      [
        { ...ids, choices: [{ index: 0, delta: { tool_calls: [{ index: 0, id: "call_0", type: "function", function: { name: "mcp__docs__search", arguments: "{}" } }] }, finish_reason: "tool_calls" }] },
        { ...ids, choices: [], usage: { prompt_tokens: 5, completion_tokens: 4, total_tokens: 9, prompt_tokens_details: { cached_tokens: 0 }, completion_tokens_details: { reasoning_tokens: 0 } } },
      ] as ChatCompletionChunk[],
      ctx,
    );
    const { items } = checkStream(events);
    expect(items[0]).toMatchObject({ type: "function_call", name: "search", namespace: "mcp__docs__", arguments: "{}" });
  });
});

describe("the converter", () => {
  const ids = { id: "chatcmpl-x", object: "chat.completion.chunk" as const, created: 1, model: "chat" };
  const chunk = (delta: object, finish: string | null = null): ChatCompletionChunk => ({ ...ids, choices: [{ index: 0, delta, finish_reason: finish as any }] });
  const usage: ChatCompletionChunk = { ...ids, choices: [], usage: { prompt_tokens: 5, completion_tokens: 4, total_tokens: 9, prompt_tokens_details: { cached_tokens: 0 }, completion_tokens_details: { reasoning_tokens: 0 } } };
  const call = (index: number, name?: string, args = "") => chunk({ tool_calls: [{ index, ...(name && { id: `call_${index}`, type: "function" }), function: { ...(name && { name }), arguments: args } }] });

  test("text after a tool call gets its own message item at the next output_index", () => {
    const { items } = checkStream(run([chunk({ role: "assistant", content: "" }), call(0, "get_time", '{"zone":"utc"}'), chunk({ content: "Done." }), chunk({}, "stop"), usage]));
    expect(items.map((i) => [i.type, i.id])).toEqual([["function_call", "fc_fixture0"], ["message", "msg_fixture1"]]);
  });

  test("empty content opens no item; a stream with no output completes with an empty output", () => {
    const { terminal } = checkStream(run([chunk({ role: "assistant", content: "" }), chunk({}, "stop"), usage]));
    expect(terminal.response.output).toEqual([]);
  });

  test("the non-streamed result is the terminal event's response", () => {
    const s = createResponsesStream(fixedContext());
    const events = [...s.start(), ...load("tool-after-text").flatMap((c) => s.push(c as ChatCompletionChunk)), ...s.finish()];
    expect(s.result()).toBe((events.at(-1) as any).response);
  });

  test("arguments for an earlier call after a later one began are a bug, not silently misfiled", () => {
    const s = createResponsesStream(fixedContext());
    s.start();
    s.push(call(0, "a", "{"));
    s.push(call(1, "b", "{"));
    expect(() => s.push(call(0, undefined, "}"))).toThrow(/continued after another began/);
  });

  test("the converter refuses calls out of order, and fails at most once", () => {
    const s = createResponsesStream(fixedContext());
    expect(() => s.push(usage)).toThrow();
    s.start();
    expect(() => s.start()).toThrow();
    expect(() => s.finish()).toThrow(/finish reason and usage/);
    expect(() => s.result()).toThrow();
    expect(s.fail({ code: null, message: "x", param: null })).toHaveLength(1);
    expect(s.fail({ code: null, message: "x", param: null })).toEqual([]);
  });
});
