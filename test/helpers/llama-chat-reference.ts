import { LlamaChat, QwenChatWrapper, TokenBias, TokenMeter, type LlamaModel, type Token } from "node-llama-cpp";
import type { ChatJob, EngineEvent, EngineResult } from "../../src/3-engines/chat-job";
import { toLlamaHistory } from "../../src/3-engines/llama/history";

// The reference the decode loop's generation is compared with (test/engines/llama/generation.test.ts):
// node-llama-cpp's own LlamaChat, which the engine used before issue 29, on a context of its own,
// run with the same settings. Plain requests (no tools, no schema) only.

type Chunk = { type: "segment" | undefined; segmentType?: string; text: string; tokens: Token[] };

export async function viaLlamaChat(model: LlamaModel, job: ChatJob, forced: readonly Token[] = [], contextSize = 1024) {
  const context = await model.createContext({ contextSize, sequences: 1, threads: 1 });
  const sequence = context.getSequence();
  const chat = new LlamaChat({ contextSequence: sequence, chatWrapper: new QwenChatWrapper({ thoughts: job.thinking ? "auto" : "discourage" }) });
  const events: EngineEvent[] = [];
  let reasoningTokens = 0;
  const push = (type: "text" | "reasoning", text: string) => {
    if (!text) return;
    const last = events.at(-1);
    if (last?.type === type) (last as { text: string }).text += text;
    else events.push({ type, text });
  };
  // the caller's bias (end-of-generation tokens included, as the engine applies it) plus one forced token per step
  const user = new Map<Token, number>();
  for (const [id, v] of job.sampling.logitBias ?? []) user.set(id as Token, v <= -100 ? -Infinity : v);
  let step = 0;
  const tokenBias = () => {
    const bias = new TokenBias(model.tokenizer);
    const map = (bias as unknown as { _biases: Map<Token, number> })._biases;
    for (const [id, v] of user) map.set(id, v);
    if (step < forced.length) map.set(forced[step]!, (map.get(forced[step]!) ?? 0) + 1000);
    step++;
    return bias;
  };
  try {
    const before = sequence.tokenMeter.getState();
    const s = job.sampling;
    const res = await chat.generateResponse(toLlamaHistory(job.turns), {
      maxTokens: job.maxTokens ?? undefined,
      temperature: s.temperature ?? 1,
      topP: s.topP,
      topK: s.topK,
      seed: s.seed,
      customStopTriggers: job.stop.length ? job.stop : undefined,
      tokenBias,
      repeatPenalty: false,
      onResponseChunk: (c: Chunk) => {
        if (c.type === "segment") {
          if (c.segmentType === "thought") reasoningTokens += c.tokens.length;
          push("reasoning", c.text);
        } else push("text", c.text);
      },
    });
    const stop = res.metadata.stopReason;
    const trigger = stop === "customStopTrigger" ? res.metadata.customStopTrigger.filter((x): x is string => typeof x === "string").join("") : null;
    const result: Omit<EngineResult, "promptTokens" | "cachedTokens"> = {
      finishReason: stop === "maxTokens" ? "length" : "stop",
      stopSequence: trigger === null ? null : (job.stop.find((x) => x === trigger) ?? job.stop.find((x) => trigger.includes(x) || x.includes(trigger)) ?? trigger),
      completionTokens: TokenMeter.diff(sequence.tokenMeter, before).usedOutputTokens,
      reasoningTokens,
      toolCalls: [],
    };
    return { events, result };
  } finally {
    chat.dispose();
    await context.dispose();
  }
}
