import type { Usage } from "../../2-services/chat/completion";
import type { FinishReason } from "../../3-engines/chat-job";
import { encodeThought } from "./reasoning";
import type { OutputOptions, ResponseEcho } from "./to-chat";

// Chat-completions results → the pieces of a Responses object (spec §2.5): output items, usage,
// status, and the response envelope that repeats the request's settings. Pure. The stream
// converter (stream.ts) assembles these; a non-streamed response is the same fold (routes.ts).

/** Fixed once per request (STYLE): every event and the final object carry the same ids. */
export interface ResponseContext {
  /** resp_… */
  id: string;
  /** Unix seconds. */
  createdAt: number;
  model: string;
  echo: ResponseEcho;
  /** The msg_… / fc_… / rs_… id of the item at an output index, minted once. */
  itemId(kind: "msg" | "fc" | "rs", outputIndex: number): string;
  /** Reasoning items and namespaced call names (to-chat.ts); absent: neither. */
  output?: OutputOptions;
}

export type ItemStatus = "in_progress" | "completed" | "incomplete";
export type ResponseStatus = "in_progress" | "completed" | "incomplete";

export interface OutputText {
  type: "output_text";
  text: string;
  annotations: never[];
}

export interface MessageItem {
  type: "message";
  id: string;
  status: ItemStatus;
  role: "assistant";
  content: OutputText[];
}

export interface FunctionCallItem {
  type: "function_call";
  id: string;
  call_id: string;
  name: string;
  arguments: string;
  status: ItemStatus;
  /** The namespace tool group of the function called. */
  namespace?: string;
}

export interface SummaryText {
  type: "summary_text";
  text: string;
}

/** The model's thought: its text as the summary, and/or encoded as encrypted_content (reasoning.ts). */
export interface ReasoningItem {
  type: "reasoning";
  id: string;
  status: ItemStatus;
  summary: SummaryText[];
  encrypted_content?: string;
}

export type OutputItem = MessageItem | FunctionCallItem | ReasoningItem;

export interface ResponseUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

export interface IncompleteDetails {
  reason: "max_output_tokens";
}

export interface ResponseObject {
  id: string;
  object: "response";
  created_at: number;
  status: ResponseStatus;
  error: null;
  incomplete_details: IncompleteDetails | null;
  instructions: string | null;
  max_output_tokens: number | null;
  model: string;
  output: OutputItem[];
  parallel_tool_calls: boolean;
  previous_response_id: null;
  reasoning: ResponseEcho["reasoning"];
  store: boolean;
  temperature: number | null;
  text: ResponseEcho["text"];
  tool_choice: ResponseEcho["tool_choice"];
  tools: ResponseEcho["tools"];
  top_p: number | null;
  truncation: "disabled";
  usage: ResponseUsage | null;
  user: string | null;
  metadata: Record<string, string>;
}

export function outputText(text: string): OutputText {
  return { type: "output_text", text, annotations: [] };
}

/** A message item; `text` null while it is being opened (no content part yet). */
export function messageItem(id: string, text: string | null, status: ItemStatus): MessageItem {
  return { type: "message", id, status, role: "assistant", content: text === null ? [] : [outputText(text)] };
}

/** A function_call item; a namespaced chat tool name is given back as its name and namespace. */
export function functionCallItem(id: string, callId: string, chatName: string, args: string, status: ItemStatus, ctx?: ResponseContext): FunctionCallItem {
  const ns = ctx?.output?.names[chatName];
  return { type: "function_call", id, call_id: callId, name: ns ? ns.name : chatName, arguments: args, status, ...(ns && { namespace: ns.namespace }) };
}

/** A reasoning item; `text` null while it is being opened. */
export function reasoningItem(id: string, text: string | null, status: ItemStatus, shape: { summary: boolean; encrypted: boolean }): ReasoningItem {
  return {
    type: "reasoning",
    id,
    status,
    summary: shape.summary && text !== null ? [{ type: "summary_text", text }] : [],
    ...(shape.encrypted && text !== null && { encrypted_content: encodeThought(text) }),
  };
}

/**
 * Spec §2.5: reasoning tokens are counted inside output_tokens; reasoning_tokens reads 0 unless the
 * thought is returned (reasoning.summary or include), when the split is reported too.
 */
export function toResponseUsage(u: Usage, reasoningShown = false): ResponseUsage {
  return {
    input_tokens: u.prompt_tokens,
    input_tokens_details: { cached_tokens: u.prompt_tokens_details.cached_tokens },
    output_tokens: u.completion_tokens,
    output_tokens_details: { reasoning_tokens: reasoningShown ? u.completion_tokens_details.reasoning_tokens : 0 },
    total_tokens: u.prompt_tokens + u.completion_tokens,
  };
}

/** Spec §2.5: an answer cut by the token cap is `incomplete` with reason max_output_tokens. */
export function toStatus(finish: FinishReason): { status: "completed" | "incomplete"; incomplete_details: IncompleteDetails | null } {
  return finish === "length" ? { status: "incomplete", incomplete_details: { reason: "max_output_tokens" } } : { status: "completed", incomplete_details: null };
}

export function responseObject(
  ctx: ResponseContext,
  state: { status: ResponseStatus; incomplete_details: IncompleteDetails | null; output: OutputItem[]; usage: ResponseUsage | null },
): ResponseObject {
  const e = ctx.echo;
  return {
    id: ctx.id,
    object: "response",
    created_at: ctx.createdAt,
    status: state.status,
    error: null,
    incomplete_details: state.incomplete_details,
    instructions: e.instructions,
    max_output_tokens: e.max_output_tokens,
    model: ctx.model,
    output: state.output,
    parallel_tool_calls: e.parallel_tool_calls,
    previous_response_id: null,
    reasoning: e.reasoning,
    store: e.store,
    temperature: e.temperature,
    text: e.text,
    tool_choice: e.tool_choice,
    tools: e.tools,
    top_p: e.top_p,
    truncation: "disabled",
    usage: state.usage,
    user: e.user,
    metadata: e.metadata,
  };
}
