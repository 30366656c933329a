import { describe, expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fromChatCompletion, thinkingSignature, toMessageId } from "../../../src/1-api/anthropic/from-chat";
import { createMessagesStream, type MessagesStreamEvent } from "../../../src/1-api/anthropic/stream";
import type { ThinkingDisplay } from "../../../src/1-api/anthropic/schema";
import { ApiError, asApiError } from "../../../src/1-api/http/errors";
import { encodeSse } from "../../../src/1-api/http/sse";
import { aggregate, type ChatCompletionChunk } from "../../../src/2-services/chat/completion";
import { checkMessagesStream, foldMessagesStream, parseSse } from "./invariants";

// Golden transcripts: canonical chat chunks in test/fixtures/anthropic/NAME.jsonl, the exact SSE
// bytes of the Messages stream in GOLDEN.sse. UPDATE_GOLDEN=1 rewrites the .sse files (then read
// the diff: a golden is only as right as its review).

const FIXTURES = join(import.meta.dir, "../../fixtures/anthropic");
const UPDATE = process.env.UPDATE_GOLDEN === "1";

interface Golden {
  golden: string;
  chunks: string;
  thinking?: ThinkingDisplay;
  stopSequence?: string;
  /** The chunks end in this failure instead of a finish. */
  fail?: unknown;
}

const GOLDENS: Golden[] = [
  { golden: "text", chunks: "text" },
  { golden: "thinking-text", chunks: "thinking-text", thinking: "shown" },
  { golden: "thinking-omitted", chunks: "thinking-text", thinking: "omitted" },
  { golden: "tool-after-text", chunks: "tool-after-text" },
  { golden: "parallel-tools", chunks: "parallel-tools" },
  { golden: "max-tokens", chunks: "max-tokens" },
  { golden: "stop-sequence", chunks: "stop-sequence", stopSequence: "there" },
  { golden: "mid-stream-error", chunks: "mid-stream-error", fail: new Error("llama context disposed") },
];

function readChunks(name: string): ChatCompletionChunk[] {
  return readFileSync(join(FIXTURES, `${name}.jsonl`), "utf8")
    .trimEnd()
    .split("\n")
    .map((l) => JSON.parse(l));
}

/** What the route does: start, push every chunk, then finish — or fail where the chunks broke off. */
function convert(g: Golden, chunks: ChatCompletionChunk[]): MessagesStreamEvent[] {
  const usage = chunks.find((c) => c.usage)?.usage;
  const s = createMessagesStream({
    id: toMessageId(chunks[0]!.id),
    model: chunks[0]!.model,
    promptTokens: usage?.prompt_tokens ?? 12,
    cachedTokens: usage?.prompt_tokens_details.cached_tokens ?? 0,
    thinking: g.thinking ?? "off",
  });
  const events = [...s.start(), ...chunks.flatMap((c) => s.push(c))];
  if (g.fail) return [...events, ...s.fail(asApiError(g.fail, "req_golden").error)];
  return [...events, ...s.finish({ stopSequence: g.stopSequence ?? null })];
}

const encode = (events: MessagesStreamEvent[]) => events.map((e) => encodeSse({ event: e.type, data: e })).join("");

describe("golden transcripts", () => {
  for (const g of GOLDENS) {
    test(`${g.golden}: the SSE bytes match the golden and keep every invariant`, () => {
      const chunks = readChunks(g.chunks);
      const sse = encode(convert(g, chunks));
      const file = join(FIXTURES, `${g.golden}.sse`);
      if (UPDATE) writeFileSync(file, sse);
      expect(sse).toBe(readFileSync(file, "utf8"));
      checkMessagesStream(parseSse(sse));
    });

    if (!g.fail)
      test(`${g.golden}: the stream folds into the non-streamed message`, () => {
        const chunks = readChunks(g.chunks);
        const ids = { id: chunks[0]!.id, created: chunks[0]!.created, model: chunks[0]!.model, toolCallId: (i: number) => `call_${i}` };
        const whole = fromChatCompletion(aggregate(ids, chunks), { thinking: g.thinking ?? "off", stopSequence: g.stopSequence ?? null });
        expect(foldMessagesStream(parseSse(encode(convert(g, chunks))))).toEqual(whole);
      });
  }
});

describe("converter rules", () => {
  const ctx = { id: "msg_x", model: "chat", promptTokens: 10, cachedTokens: 0, thinking: "off" as ThinkingDisplay };
  const chunk = (delta: ChatCompletionChunk["choices"][0]["delta"], finish: ChatCompletionChunk["choices"][0]["finish_reason"] = null): ChatCompletionChunk => ({
    id: "chatcmpl-x",
    object: "chat.completion.chunk",
    created: 1,
    model: "chat",
    choices: [{ index: 0, delta, finish_reason: finish }],
  });
  const usage = (completion: number): ChatCompletionChunk => ({
    ...chunk({}),
    choices: [],
    usage: { prompt_tokens: 10, completion_tokens: completion, total_tokens: 10 + completion, prompt_tokens_details: { cached_tokens: 0 }, completion_tokens_details: { reasoning_tokens: 0 } },
  });

  test("message_start announces the prompt with cached tokens apart", () => {
    const [start] = createMessagesStream({ ...ctx, promptTokens: 50, cachedTokens: 42 }).start() as any[];
    expect(start.message.usage).toEqual({ input_tokens: 8, cache_creation_input_tokens: 0, cache_read_input_tokens: 42, output_tokens: 0, output_tokens_details: { thinking_tokens: 0 } });
  });

  test("reasoning is dropped when thinking was not asked", () => {
    const s = createMessagesStream(ctx);
    expect(s.push(chunk({ reasoning_content: "hmm" }))).toEqual([]);
    expect(s.push(chunk({ content: "\n\nHi" })).map((e: any) => e.delta?.text ?? e.type)).toEqual(["content_block_start", "\n\nHi"]);
  });

  test("the empty first content delta opens no block", () => {
    expect(createMessagesStream(ctx).push(chunk({ role: "assistant", content: "" }))).toEqual([]);
  });

  test("newlines between the thought and the answer belong to neither block", () => {
    const s = createMessagesStream({ ...ctx, thinking: "shown" });
    s.push(chunk({ reasoning_content: "ok" }));
    expect(s.push(chunk({ content: "\n" }))).toEqual([]);
    const events = s.push(chunk({ content: "\nAnswer\n" })) as any[];
    expect(events.map((e) => e.type)).toEqual(["content_block_delta", "content_block_stop", "content_block_start", "content_block_delta"]);
    expect(events[0].delta).toEqual({ type: "signature_delta", signature: thinkingSignature("ok") });
    expect(events[3].delta.text).toBe("Answer\n");
  });

  test("a tool call's arguments continuing after another block began are a stream error", () => {
    const s = createMessagesStream(ctx);
    s.push(chunk({ tool_calls: [{ index: 0, id: "call_a", type: "function", function: { name: "f", arguments: "" } }] }));
    s.push(chunk({ tool_calls: [{ index: 1, id: "call_b", type: "function", function: { name: "g", arguments: "" } }] }));
    expect(() => s.push(chunk({ tool_calls: [{ index: 0, function: { arguments: "{}" } }] }))).toThrow("tool call 0");
  });

  test("finish without a finish reason or usage is an error, not a made-up stop", () => {
    const s = createMessagesStream(ctx);
    s.push(chunk({ content: "Hi" }));
    expect(() => s.finish({ stopSequence: null })).toThrow();
    s.push(chunk({}, "stop"));
    s.push(usage(1));
    expect(s.finish({ stopSequence: null }).map((e) => e.type)).toEqual(["content_block_stop", "message_delta", "message_stop"]);
  });

  test("an API error mid-stream keeps its Anthropic type", () => {
    const s = createMessagesStream(ctx);
    expect(s.fail(new ApiError("model_unavailable", "the model was unloaded"))).toEqual([{ type: "error", error: { type: "overloaded_error", message: "the model was unloaded" } }]);
  });
});
