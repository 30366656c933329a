import type { ChatCompletionChunk, ToolCallDelta, Usage } from "../../2-services/chat/completion";
import type { FinishReason } from "../../3-engines/chat-job";
import { toAnthropicErrorBody, type ApiError } from "../http/errors";
import {
  mapStopReason,
  textAfterThinking,
  thinkingSignature,
  toMessagesUsage,
  toToolUseId,
  type MessagesResponse,
  type MessagesUsage,
  type ResponseBlock,
} from "./from-chat";
import type { ThinkingDisplay } from "./schema";

// Chat chunks → Messages stream events (spec §6): message_start, then each content block opened,
// filled and closed in turn (content_block_start / _delta / _stop, indexes 0, 1, …), then
// message_delta with the stop reason and output usage, then message_stop. Pure: typed chunks in,
// typed events out; the route hands them to api/http/sse.ts. The blocks are the ones from-chat.ts
// builds, so a stream folds into the non-streamed message.

export type BlockDelta =
  | { type: "text_delta"; text: string }
  | { type: "thinking_delta"; thinking: string }
  | { type: "signature_delta"; signature: string }
  | { type: "input_json_delta"; partial_json: string };

export type MessagesStreamEvent =
  | {
      type: "message_start";
      message: Omit<MessagesResponse, "stop_reason" | "stop_sequence"> & { stop_reason: null; stop_sequence: null };
    }
  | { type: "content_block_start"; index: number; content_block: ResponseBlock }
  | { type: "content_block_delta"; index: number; delta: BlockDelta }
  | { type: "content_block_stop"; index: number }
  | {
      type: "message_delta";
      delta: { stop_reason: MessagesResponse["stop_reason"]; stop_sequence: string | null };
      usage: Pick<MessagesUsage, "output_tokens" | "output_tokens_details">;
    }
  | { type: "message_stop" }
  | { type: "error"; error: { type: string; message: string } };

/** Fixed once per request (STYLE): every event of a stream names the same message. */
export interface MessagesStreamContext {
  id: string;
  model: string;
  /** ChatRun.promptTokens and .cachedTokens: known before the first token. */
  promptTokens: number;
  cachedTokens: number;
  thinking: ThinkingDisplay;
}

type State = "idle" | "text" | "thinking" | "tool";

export function createMessagesStream(ctx: MessagesStreamContext) {
  let state: State = "idle";
  /** Index of the open block, or of the last one closed; -1 before the first. */
  let index = -1;
  /** Text of the open thinking block: its signature is a digest of it. */
  let thought = "";
  /** Chat index of the tool call the open tool_use block carries. */
  let call = -1;
  let finishReason: FinishReason | null = null;
  let usage: Usage | null = null;

  function close(): MessagesStreamEvent[] {
    if (state === "idle") return [];
    const out: MessagesStreamEvent[] = [];
    // The signature arrives just before its thinking block stops, as Anthropic sends it.
    if (state === "thinking") out.push({ type: "content_block_delta", index, delta: { type: "signature_delta", signature: thinkingSignature(thought) } });
    out.push({ type: "content_block_stop", index });
    state = "idle";
    return out;
  }

  function open(next: State, block: ResponseBlock): MessagesStreamEvent[] {
    const out = close();
    state = next;
    index += 1;
    out.push({ type: "content_block_start", index, content_block: block });
    return out;
  }

  function reasoning(text: string): MessagesStreamEvent[] {
    const out: MessagesStreamEvent[] = [];
    if (state !== "thinking") {
      out.push(...open("thinking", { type: "thinking", thinking: "", signature: "" }));
      thought = "";
    }
    thought += text;
    if (ctx.thinking === "shown") out.push({ type: "content_block_delta", index, delta: { type: "thinking_delta", thinking: text } });
    return out;
  }

  function content(raw: string): MessagesStreamEvent[] {
    const text = state === "thinking" ? textAfterThinking(raw) : raw;
    if (!text) return [];
    const out: MessagesStreamEvent[] = state === "text" ? [] : open("text", { type: "text", text: "" });
    out.push({ type: "content_block_delta", index, delta: { type: "text_delta", text } });
    return out;
  }

  function toolCall(d: ToolCallDelta): MessagesStreamEvent[] {
    let out: MessagesStreamEvent[] = [];
    if (d.id !== undefined) {
      out = open("tool", { type: "tool_use", id: toToolUseId(d.id), name: d.function.name ?? "", input: {} });
      call = d.index;
    } else if (state !== "tool" || d.index !== call) {
      // Blocks cannot interleave; the engine finishes one call before it starts the next.
      throw new Error(`tool call ${d.index} continued after another block began`);
    }
    if (d.function.arguments) out.push({ type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: d.function.arguments } });
    return out;
  }

  return {
    start(): MessagesStreamEvent[] {
      const u = toMessagesUsage({
        prompt_tokens: ctx.promptTokens,
        completion_tokens: 0,
        total_tokens: ctx.promptTokens,
        prompt_tokens_details: { cached_tokens: ctx.cachedTokens },
        completion_tokens_details: { reasoning_tokens: 0 },
      });
      return [
        {
          type: "message_start",
          message: { id: ctx.id, type: "message", role: "assistant", model: ctx.model, content: [], stop_reason: null, stop_sequence: null, usage: u },
        },
      ];
    },

    push(chunk: ChatCompletionChunk): MessagesStreamEvent[] {
      if (chunk.usage) usage = chunk.usage;
      const out: MessagesStreamEvent[] = [];
      for (const choice of chunk.choices) {
        const d = choice.delta;
        if (d.reasoning_content && ctx.thinking !== "off") out.push(...reasoning(d.reasoning_content));
        if (d.content) out.push(...content(d.content));
        for (const t of d.tool_calls ?? []) out.push(...toolCall(t));
        if (choice.finish_reason) finishReason = choice.finish_reason;
      }
      return out;
    },

    /** After the last chunk; `stopSequence` is ChatRun.stopSequence(). */
    finish(end: { stopSequence: string | null }): MessagesStreamEvent[] {
      if (!usage || !finishReason) throw new Error("the chat stream ended without a finish reason and usage");
      const u = toMessagesUsage(usage);
      return [
        ...close(),
        {
          type: "message_delta",
          delta: { stop_reason: mapStopReason(finishReason, end.stopSequence), stop_sequence: finishReason === "stop" ? end.stopSequence : null },
          usage: { output_tokens: u.output_tokens, output_tokens_details: u.output_tokens_details },
        },
        { type: "message_stop" },
      ];
    },

    /** A failure mid-stream: the error event, after which the stream ends (STYLE "Errors"). */
    fail(error: ApiError): MessagesStreamEvent[] {
      return [{ type: "error", error: toAnthropicErrorBody(error).error }];
    },
  };
}

export type MessagesStream = ReturnType<typeof createMessagesStream>;
