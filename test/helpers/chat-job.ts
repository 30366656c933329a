import type { ChatJob } from "../../src/3-engines/chat-job";

/** A plain chat job of one user message, greedy, as the engine gets it (engine tests). */
export function userJob(text: string, o: Partial<ChatJob> = {}): ChatJob {
  return {
    model: "chat",
    turns: [{ role: "user", text, images: [] }],
    tools: [],
    toolChoice: "auto",
    parallelToolCalls: true,
    format: null,
    thinking: false,
    maxTokens: 24,
    stop: [],
    sampling: { temperature: 0 },
    stream: true,
    includeUsage: true,
    ...o,
  };
}
