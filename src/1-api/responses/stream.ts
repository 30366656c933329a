import type { ChatCompletionChunk, ToolCallDelta } from "../../2-services/chat/completion";
import type { FinishReason } from "../../3-engines/chat-job";
import {
  functionCallItem,
  messageItem,
  outputText,
  reasoningItem,
  responseObject,
  toResponseUsage,
  toStatus,
  type ItemStatus,
  type OutputItem,
  type OutputText,
  type ResponseContext,
  type ResponseObject,
  type ResponseUsage,
  type SummaryText,
} from "./from-chat";

// Chat chunks → Responses stream events (spec §6). A small converter: start() → push(chunk)… →
// finish() or fail(error), each returning the events to send. One output item is open at a time
// (the state below): text opens a message item, a tool call opens a function_call item, and
// whatever was open is closed first — so text after a tool call, and each of several parallel
// calls, gets its own output_index. Every event carries a sequence_number rising by one from 0.
// Reasoning deltas become a reasoning item only when the request asked for the thought
// (reasoning.summary: streamed as summary text; include reasoning.encrypted_content: the item
// carries it when done); otherwise they are never turned into events (§2.5).

interface Base {
  sequence_number: number;
}
interface ItemRef extends Base {
  item_id: string;
  output_index: number;
}
export type ResponseEvent =
  | (Base & { type: "response.created" | "response.in_progress" | "response.completed" | "response.incomplete"; response: ResponseObject })
  | (Base & { type: "response.output_item.added" | "response.output_item.done"; output_index: number; item: OutputItem })
  | (ItemRef & { type: "response.content_part.added" | "response.content_part.done"; content_index: number; part: OutputText })
  | (ItemRef & { type: "response.output_text.delta"; content_index: number; delta: string; logprobs: never[] })
  | (ItemRef & { type: "response.output_text.done"; content_index: number; text: string; logprobs: never[] })
  | (ItemRef & { type: "response.function_call_arguments.delta"; delta: string })
  | (ItemRef & { type: "response.function_call_arguments.done"; arguments: string })
  | (ItemRef & { type: "response.reasoning_summary_part.added" | "response.reasoning_summary_part.done"; summary_index: number; part: SummaryText })
  | (ItemRef & { type: "response.reasoning_summary_text.delta"; summary_index: number; delta: string })
  | (ItemRef & { type: "response.reasoning_summary_text.done"; summary_index: number; text: string })
  | (Base & { type: "error"; code: string | null; message: string; param: string | null });

type Unsequenced<E> = E extends unknown ? Omit<E, "sequence_number"> : never;

/** The error a failed stream reports: OpenAI's envelope fields. */
export interface StreamError {
  code: string | null;
  message: string;
  param: string | null;
}

type Open =
  | { kind: "idle" }
  | { kind: "text"; index: number; id: string; text: string }
  | { kind: "thinking"; index: number; id: string; text: string }
  | { kind: "tool"; index: number; id: string; chatIndex: number; callId: string; name: string; args: string };

export interface ResponsesStream {
  /** response.created and response.in_progress. */
  start(): ResponseEvent[];
  push(chunk: ChatCompletionChunk): ResponseEvent[];
  /** Closes the open item and sends the terminal event (response.completed or response.incomplete). */
  finish(): ResponseEvent[];
  /** A failure after start: one `error` event, and the stream is over. */
  fail(error: StreamError): ResponseEvent[];
  /** The final response object, once finished: the non-streamed answer is this same fold. */
  result(): ResponseObject;
}

export function createResponsesStream(ctx: ResponseContext): ResponsesStream {
  let phase: "new" | "open" | "ended" = "new";
  let open: Open = { kind: "idle" };
  let seq = 0;
  const output: OutputItem[] = [];
  let finishReason: FinishReason | null = null;
  let usage: ResponseUsage | null = null;
  let final: ResponseObject | null = null;

  const emit = (e: Unsequenced<ResponseEvent>): ResponseEvent => {
    const { type, ...rest } = e;
    return { type, sequence_number: seq++, ...rest } as ResponseEvent;
  };
  const ref = (o: { id: string; index: number }) => ({ item_id: o.id, output_index: o.index });
  const expect = (want: typeof phase, what: string) => {
    if (phase !== want) throw new Error(`responses stream: ${what} while ${phase}`);
  };

  function close(status: ItemStatus): ResponseEvent[] {
    const o = open;
    open = { kind: "idle" };
    if (o.kind === "idle") return [];
    if (o.kind === "thinking") {
      const shape = ctx.output!.reasoning!;
      const item = reasoningItem(o.id, o.text, status, shape);
      output.push(item);
      const part: SummaryText = { type: "summary_text", text: o.text };
      return [
        ...(shape.summary
          ? [
              emit({ type: "response.reasoning_summary_text.done", ...ref(o), summary_index: 0, text: o.text }),
              emit({ type: "response.reasoning_summary_part.done", ...ref(o), summary_index: 0, part }),
            ]
          : []),
        emit({ type: "response.output_item.done", output_index: o.index, item }),
      ];
    }
    if (o.kind === "text") {
      const item = messageItem(o.id, o.text, status);
      output.push(item);
      return [
        emit({ type: "response.output_text.done", ...ref(o), content_index: 0, text: o.text, logprobs: [] }),
        emit({ type: "response.content_part.done", ...ref(o), content_index: 0, part: outputText(o.text) }),
        emit({ type: "response.output_item.done", output_index: o.index, item }),
      ];
    }
    const item = functionCallItem(o.id, o.callId, o.name, o.args, status, ctx);
    output.push(item);
    return [
      emit({ type: "response.function_call_arguments.done", ...ref(o), arguments: o.args }),
      emit({ type: "response.output_item.done", output_index: o.index, item }),
    ];
  }

  function text(delta: string): ResponseEvent[] {
    const events: ResponseEvent[] = [];
    if (open.kind !== "text") {
      events.push(...close("completed"));
      const index = output.length;
      const o = (open = { kind: "text", index, id: ctx.itemId("msg", index), text: "" });
      events.push(
        emit({ type: "response.output_item.added", output_index: index, item: messageItem(o.id, null, "in_progress") }),
        emit({ type: "response.content_part.added", ...ref(o), content_index: 0, part: outputText("") }),
      );
    }
    open.text += delta;
    events.push(emit({ type: "response.output_text.delta", ...ref(open), content_index: 0, delta, logprobs: [] }));
    return events;
  }

  function thinking(delta: string): ResponseEvent[] {
    const shape = ctx.output?.reasoning;
    if (!shape) return [];
    const events: ResponseEvent[] = [];
    if (open.kind !== "thinking") {
      events.push(...close("completed"));
      const index = output.length;
      const o = (open = { kind: "thinking", index, id: ctx.itemId("rs", index), text: "" });
      events.push(emit({ type: "response.output_item.added", output_index: index, item: reasoningItem(o.id, null, "in_progress", shape) }));
      if (shape.summary) events.push(emit({ type: "response.reasoning_summary_part.added", ...ref(o), summary_index: 0, part: { type: "summary_text", text: "" } }));
    }
    open.text += delta;
    if (shape.summary) events.push(emit({ type: "response.reasoning_summary_text.delta", ...ref(open), summary_index: 0, delta }));
    return events;
  }

  function toolCall(t: ToolCallDelta): ResponseEvent[] {
    const events: ResponseEvent[] = [];
    if (open.kind !== "tool" || open.chatIndex !== t.index) {
      // The chat stream names a call (id and name) on its first delta, and calls come one after another.
      if (!t.id || !t.function.name) throw new Error(`responses stream: tool call ${t.index} continued after another began`);
      events.push(...close("completed"));
      const index = output.length;
      const o = (open = { kind: "tool", index, id: ctx.itemId("fc", index), chatIndex: t.index, callId: t.id, name: t.function.name, args: "" });
      events.push(emit({ type: "response.output_item.added", output_index: index, item: functionCallItem(o.id, o.callId, o.name, "", "in_progress", ctx) }));
    }
    const delta = t.function.arguments;
    if (delta) {
      open.args += delta;
      events.push(emit({ type: "response.function_call_arguments.delta", ...ref(open), delta }));
    }
    return events;
  }

  return {
    start() {
      expect("new", "start");
      phase = "open";
      const snapshot = () => responseObject(ctx, { status: "in_progress", incomplete_details: null, output: [], usage: null });
      return [emit({ type: "response.created", response: snapshot() }), emit({ type: "response.in_progress", response: snapshot() })];
    },

    push(chunk) {
      expect("open", "a chunk came");
      const events: ResponseEvent[] = [];
      for (const choice of chunk.choices) {
        const d = choice.delta;
        if (d.reasoning_content) events.push(...thinking(d.reasoning_content));
        if (d.content) events.push(...text(d.content));
        for (const t of d.tool_calls ?? []) events.push(...toolCall(t));
        if (choice.finish_reason) finishReason = choice.finish_reason;
      }
      if (chunk.usage) usage = toResponseUsage(chunk.usage, ctx.output?.reasoning != null);
      return events;
    },

    finish() {
      expect("open", "finish");
      if (finishReason === null || usage === null) throw new Error("responses stream: the chat stream ended without a finish reason and usage");
      const { status, incomplete_details } = toStatus(finishReason);
      // The item the cap cut short is incomplete; the ones before it were finished.
      const events = close(status);
      phase = "ended";
      final = responseObject(ctx, { status, incomplete_details, output, usage });
      events.push(emit({ type: status === "incomplete" ? "response.incomplete" : "response.completed", response: final }));
      return events;
    },

    fail(error) {
      if (phase === "ended") return [];
      phase = "ended";
      return [emit({ type: "error", code: error.code, message: error.message, param: error.param })];
    },

    result() {
      if (!final) throw new Error("responses stream: no result before finish");
      return final;
    },
  };
}
