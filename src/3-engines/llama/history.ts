import type { ChatHistoryItem, ChatModelFunctions, ChatModelResponse } from "node-llama-cpp";
import type { ChatTurn, ToolSpec } from "../chat-job";
import { toFunctionParams } from "./json-schema";
import { withMarkers } from "./vision/prompt";

// ChatJob turns → node-llama-cpp chat history. Pure. node-llama-cpp keeps a tool result inside
// the model response that made the call, so tool turns are folded into the assistant turn before
// them, and assistant turns separated only by tool turns become one model response.

export function toLlamaHistory(turns: ChatTurn[], imageMarker?: (index: number) => string): ChatHistoryItem[] {
  let images = 0;
  const results = new Map<string, string>();
  for (const t of turns) if (t.role === "tool") results.set(t.toolCallId, t.text);

  const items: ChatHistoryItem[] = [];
  let previous: ChatTurn["role"] | null = null;
  for (const t of turns) {
    if (t.role === "system") items.push({ type: "system", text: t.text });
    else if (t.role === "user") {
      // Images become markers where they sat among the text parts, numbered across the request.
      const first = images;
      images += t.images.length;
      const text = imageMarker && t.images.length ? withMarkers(t.text, t.images.map((i) => i.at), imageMarker, first) : t.text;
      items.push({ type: "user", text });
    }
    else if (t.role === "assistant") {
      const response: ChatModelResponse["response"] = [];
      if (t.reasoning) response.push({ type: "segment", segmentType: "thought", text: t.reasoning, ended: true });
      if (t.text) response.push(t.text);
      t.toolCalls.forEach((c, i) =>
        response.push({ type: "functionCall", name: c.name, params: JSON.parse(c.arguments), result: results.get(c.id) ?? "", startsNewChunk: i === 0 }),
      );
      const last = items.at(-1);
      if (last?.type === "model" && previous === "tool") last.response.push(...response);
      else items.push({ type: "model", response });
    }
    previous = t.role;
  }
  return items;
}

/** The history as LlamaChat evaluates it: a trailing empty model response unless one is being continued. */
export function withOpenModelResponse(history: ChatHistoryItem[]): ChatHistoryItem[] {
  return history.at(-1)?.type === "model" ? history : [...history, { type: "model", response: [] }];
}

export function toLlamaFunctions(tools: ToolSpec[]): ChatModelFunctions {
  // No prototype: a tool may be named "__proto__" or "constructor" (OpenAI's name pattern allows both).
  const out: Record<string, { description?: string; params?: any }> = Object.create(null);
  for (const t of tools) {
    // The function as documented to the model in the prompt; the call's grammar is toToolGbnf's.
    const params = t.parameters ? toFunctionParams(t.parameters) : null;
    out[t.name] = { description: t.description, ...(params ? { params } : {}) };
  }
  return out;
}
