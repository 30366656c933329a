import { createHash } from "node:crypto";
import type { ChatCompletion, Usage } from "../../2-services/chat/completion";
import type { FinishReason } from "../../3-engines/chat-job";
import type { ThinkingDisplay } from "./schema";

// Chat completion → Messages response (spec §2.6). Pure: plain data in, plain data out.
// stream.ts builds the same blocks from chunks, so a stream folds into exactly this object.

export type StopReason = "end_turn" | "max_tokens" | "tool_use" | "stop_sequence";

export type ResponseBlock =
  | { type: "thinking"; thinking: string; signature: string }
  | { type: "text"; text: string }
  | { type: "tool_use"; id: string; name: string; input: Record<string, unknown> };

/**
 * Anthropic counts cached prompt tokens apart: input_tokens excludes them, so that
 * input_tokens + cache_read_input_tokens + cache_creation_input_tokens is the whole prompt.
 * This server reuses a slot's prefix without creating cache entries on request: creation is 0.
 */
export interface MessagesUsage {
  input_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
  output_tokens: number;
  /** Reasoning tokens, counted inside output_tokens (spec §8: thinking is billed as output). */
  output_tokens_details: { thinking_tokens: number };
}

export interface MessagesResponse {
  id: string;
  type: "message";
  role: "assistant";
  model: string;
  content: ResponseBlock[];
  stop_reason: StopReason;
  stop_sequence: string | null;
  usage: MessagesUsage;
}

/** Fixed per request: the message id follows the completion id ("chatcmpl-X" → "msg_X"). */
export function toMessageId(completionId: string): string {
  return `msg_${completionId.replace(/^chatcmpl-/, "")}`;
}

/** "call_X" → "toolu_X": the same call keeps one id in streams, answers and the next request. */
export function toToolUseId(callId: string): string {
  return `toolu_${callId.replace(/^call_/, "")}`;
}

/**
 * An opaque, deterministic signature for a thinking block: a digest of its text. Signatures sent
 * back are accepted as they are (to-chat.ts); nothing here depends on verifying them.
 */
export function thinkingSignature(thinking: string): string {
  return createHash("sha256").update("appliance/thinking/v1\n").update(thinking).digest("base64");
}

export function mapStopReason(finish: FinishReason, stopSequence: string | null): StopReason {
  switch (finish) {
    case "length":
      return "max_tokens";
    case "tool_calls":
      return "tool_use";
    case "stop":
      return stopSequence !== null ? "stop_sequence" : "end_turn";
  }
}

export function toMessagesUsage(u: Usage): MessagesUsage {
  const cached = u.prompt_tokens_details.cached_tokens;
  return {
    input_tokens: u.prompt_tokens - cached,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: cached,
    output_tokens: u.completion_tokens,
    output_tokens_details: { thinking_tokens: u.completion_tokens_details.reasoning_tokens },
  };
}

/** Tool input from the arguments text; arguments cut by max_tokens are not an object: `{}`. */
export function parseToolInput(args: string): Record<string, unknown> {
  try {
    const v = JSON.parse(args);
    return typeof v === "object" && v !== null && !Array.isArray(v) ? v : {};
  } catch {
    return {};
  }
}

/**
 * The text after a thinking block: the model's template puts "\n\n" after `</think>`, which
 * belongs to neither block (Messages text does not begin with the separator).
 */
export function textAfterThinking(text: string): string {
  return text.replace(/^\n+/, "");
}

export interface FromChatContext {
  thinking: ThinkingDisplay;
  /** ChatRun.stopSequence(): the stop sequence that ended the answer, if one did. */
  stopSequence: string | null;
}

export function fromChatCompletion(c: ChatCompletion, ctx: FromChatContext): MessagesResponse {
  const choice = c.choices[0]!;
  const m = choice.message;
  const content: ResponseBlock[] = [];
  const reasoning = ctx.thinking !== "off" ? (m.reasoning_content ?? "") : "";
  if (reasoning) content.push({ type: "thinking", thinking: ctx.thinking === "shown" ? reasoning : "", signature: thinkingSignature(reasoning) });
  const text = reasoning ? textAfterThinking(m.content ?? "") : (m.content ?? "");
  if (text) content.push({ type: "text", text });
  for (const call of m.tool_calls ?? [])
    content.push({ type: "tool_use", id: toToolUseId(call.id), name: call.function.name, input: parseToolInput(call.function.arguments) });
  return {
    id: toMessageId(c.id),
    type: "message",
    role: "assistant",
    model: c.model,
    content,
    stop_reason: mapStopReason(choice.finish_reason, ctx.stopSequence),
    stop_sequence: choice.finish_reason === "stop" ? ctx.stopSequence : null,
    usage: toMessagesUsage(c.usage),
  };
}
