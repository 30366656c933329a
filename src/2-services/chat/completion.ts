import type { EngineEvent, EngineResult, FinishReason } from "../../3-engines/chat-job";

// The chat-completions objects the service produces (spec §2.4): typed chunks, and the one
// non-streamed object built from the very same chunks, so streamed text = non-streamed text.

export interface ToolCallDelta {
  index: number;
  id?: string;
  type?: "function";
  function: { name?: string; arguments: string };
}

export interface ChunkDelta {
  role?: "assistant";
  content?: string;
  /** Internal: only translators that return reasoning (Messages `thinking`) ever see it. */
  reasoning_content?: string;
  tool_calls?: ToolCallDelta[];
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
  completion_tokens_details: { reasoning_tokens: number };
}

export interface ChatCompletionChunk {
  id: string;
  object: "chat.completion.chunk";
  created: number;
  model: string;
  choices: { index: 0; delta: ChunkDelta; finish_reason: FinishReason | null }[];
  usage?: Usage | null;
}

export interface ChatCompletion {
  id: string;
  object: "chat.completion";
  created: number;
  model: string;
  choices: {
    index: 0;
    message: {
      role: "assistant";
      content: string | null;
      reasoning_content?: string;
      tool_calls?: { id: string; type: "function"; function: { name: string; arguments: string } }[];
    };
    finish_reason: FinishReason;
  }[];
  usage: Usage;
}

/** Ids and `created` fixed once per request (STYLE): every chunk of a stream carries the same. */
export interface CompletionIds {
  id: string;
  created: number;
  model: string;
  /** `call_…` id of the n-th tool call, minted once. */
  toolCallId(index: number): string;
}

export function toUsage(r: EngineResult): Usage {
  return {
    prompt_tokens: r.promptTokens,
    completion_tokens: r.completionTokens,
    total_tokens: r.promptTokens + r.completionTokens,
    prompt_tokens_details: { cached_tokens: r.cachedTokens },
    completion_tokens_details: { reasoning_tokens: r.reasoningTokens },
  };
}

export function chunk(ids: CompletionIds, delta: ChunkDelta, finish: FinishReason | null = null): ChatCompletionChunk {
  return { id: ids.id, object: "chat.completion.chunk", created: ids.created, model: ids.model, choices: [{ index: 0, delta, finish_reason: finish }] };
}

export function usageChunk(ids: CompletionIds, usage: Usage): ChatCompletionChunk {
  return { id: ids.id, object: "chat.completion.chunk", created: ids.created, model: ids.model, choices: [], usage };
}

/** One engine event → the delta it becomes (null: nothing to send). */
export function eventDelta(ids: CompletionIds, e: EngineEvent, includeReasoning: boolean): ChunkDelta | null {
  switch (e.type) {
    case "text":
      return { content: e.text };
    case "reasoning":
      return includeReasoning ? { reasoning_content: e.text } : null;
    case "tool_call":
      return { tool_calls: [{ index: e.index, id: ids.toolCallId(e.index), type: "function", function: { name: e.name, arguments: "" } }] };
    case "tool_args":
      return { tool_calls: [{ index: e.index, function: { arguments: e.text } }] };
  }
}

/** Folds a stream of chunks into the non-streamed completion. */
export function aggregate(ids: CompletionIds, chunks: ChatCompletionChunk[]): ChatCompletion {
  let content = "";
  let reasoning = "";
  let finish: FinishReason = "stop";
  let usage: Usage | null = null;
  const calls: { id: string; type: "function"; function: { name: string; arguments: string } }[] = [];
  for (const c of chunks) {
    if (c.usage) usage = c.usage;
    for (const choice of c.choices) {
      const d = choice.delta;
      if (d.content) content += d.content;
      if (d.reasoning_content) reasoning += d.reasoning_content;
      for (const t of d.tool_calls ?? []) {
        const call = (calls[t.index] ??= { id: t.id ?? ids.toolCallId(t.index), type: "function", function: { name: "", arguments: "" } });
        if (t.function.name) call.function.name = t.function.name;
        call.function.arguments += t.function.arguments;
      }
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  if (!usage) throw new Error("aggregate: the stream carried no usage");
  const toolCalls = calls.filter(Boolean);
  return {
    id: ids.id,
    object: "chat.completion",
    created: ids.created,
    model: ids.model,
    choices: [
      {
        index: 0,
        message: {
          role: "assistant",
          content: content || (toolCalls.length ? null : ""),
          ...(reasoning ? { reasoning_content: reasoning } : {}),
          ...(toolCalls.length ? { tool_calls: toolCalls } : {}),
        },
        finish_reason: finish,
      },
    ],
    usage,
  };
}
