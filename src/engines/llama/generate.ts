import {
  LlamaChat,
  TokenBias,
  TokenMeter,
  type ChatHistoryItem,
  type ChatModelFunctions,
  type ChatModelSegment,
  type ChatWrapper,
  type LlamaContextSequence,
  type LlamaGrammar,
  type Token,
} from "node-llama-cpp";
import type { ChatJob, EngineEvent, EngineResult, FinishReason } from "../../chat/job";
import { freshSeed } from "./native-sampler";

// One generation on one slot, driven through node-llama-cpp's LlamaChat with the model's own
// chat wrapper. Thinking with a response_format runs in two passes (issue "chat engine": the
// schema applies to the answer after the thinking): first the reasoning, unconstrained, stopped
// at the end of the thought; then the answer under the grammar, continuing the same response.

export interface GenerateRequest {
  sequence: LlamaContextSequence;
  wrapper: ChatWrapper;
  history: ChatHistoryItem[];
  functions?: ChatModelFunctions;
  grammar?: LlamaGrammar;
  thinking: boolean;
  job: ChatJob;
  maxTokens: number;
  promptTokens: number;
  cachedTokens: number;
  tokenBias?: () => TokenBias;
  /** Tokens of `<think>\\n` (the wrapper only opens a thought on the newline), forced first in a reasoning pass. */
  thinkOpen: Token[];
  onEvent: (e: EngineEvent) => void;
  signal: AbortSignal;
}

/** Free text a model may write, beside tools and a schema, before it is taken as answering (not calling). */
const FREE_TEXT_BEFORE_SCHEMA = 24;

type Chunk = { type: "segment" | undefined; segmentType?: string; text: string; tokens: Token[]; segmentEndTime?: Date };

export async function generate(r: GenerateRequest): Promise<EngineResult> {
  const chat = new LlamaChat({ contextSequence: r.sequence, chatWrapper: r.wrapper });
  const before = r.sequence.tokenMeter.getState();
  const used = () => TokenMeter.diff(r.sequence.tokenMeter, before).usedOutputTokens;
  let reasoningTokens = 0;
  const onReasoning = (c: Chunk) => {
    if (c.segmentType === "thought") reasoningTokens += c.tokens.length;
    if (c.text) r.onEvent({ type: "reasoning", text: c.text });
  };
  try {
    let history = r.history;
    let stop!: string; // set by the pass that answers (tools, schema or plain text)
    let stopSequence: string | null = null;
    let toolCalls: EngineResult["toolCalls"] = [];
    if (r.grammar && r.thinking) {
      const thought = await reasoningPass(chat, r, onReasoning);
      // A thought cut by max_tokens or the caller is over; one the model ended with end-of-generation
      // before its closing marker is closed here and answered under the schema (issue 24: structured
      // output after thinking never ends empty).
      if (thought.stop === "maxTokens" || r.signal.aborted) return result(r, "length", used(), reasoningTokens, []);
      if (thought.segment) history = continuing(history, { ...thought.segment, ended: true });
    }
    const remaining = r.maxTokens - used();
    if (remaining <= 0) return result(r, "length", used(), reasoningTokens, []);
    let answer = "";
    const answering = (c: Chunk) => {
      if (c.type === "segment") return onReasoning(c);
      answer += c.text;
      if (c.text) r.onEvent({ type: "text", text: c.text });
    };
    const options = sampling(r, remaining, r.tokenBias, answering);
    // Tools beside a schema (an agent's tools and its output type): the model may call a tool; if
    // it answers instead, that free text is not the answer — it is generated again under the schema.
    let answerUnderSchema = !r.functions;
    if (r.functions) {
      const args = toolArgsStream(r.onEvent);
      // With a schema, free text is not the answer: once it runs past a few tokens with no call
      // begun, the pass ends and the answer is generated under the schema with what budget is left.
      const undecided = new AbortController();
      const onAbort = () => undecided.abort();
      r.signal.addEventListener("abort", onAbort, { once: true });
      let freeTokens = 0;
      const deciding = (c: Chunk) => {
        if (c.type === "segment") return onReasoning(c);
        freeTokens += c.tokens.length;
        if (freeTokens > FREE_TEXT_BEFORE_SCHEMA) undecided.abort();
      };
      const res = await chat.generateResponse(history, {
        ...(r.grammar ? sampling(r, remaining, r.tokenBias, deciding, undecided.signal) : options),
        functions: r.functions,
        documentFunctionParams: true,
        maxParallelFunctionCalls: r.job.parallelToolCalls ? undefined : 1,
        onFunctionCallParamsChunk: (chunk) => {
          freeTokens = -Infinity; // a call has begun: it is not cut for being text
          args.push(chunk);
        },
      }).finally(() => r.signal.removeEventListener("abort", onAbort));
      stop = res.metadata.stopReason;
      if (res.metadata.stopReason === "customStopTrigger") stopSequence = triggerText(res.metadata.customStopTrigger, r.job.stop);
      toolCalls = (res.functionCalls ?? []).map((c, i) => ({ name: c.functionName, arguments: args.text(i) ?? JSON.stringify(c.params ?? {}) }));
      answerUnderSchema = r.grammar !== undefined && toolCalls.length === 0 && stop !== "maxTokens" && !r.signal.aborted;
    }
    if (answerUnderSchema) {
      const left = r.maxTokens - used();
      if (left <= 0) return result(r, "length", used(), reasoningTokens, []);
      stopSequence = null;
      const res = await chat.generateResponse(history, { ...(r.functions ? sampling(r, left, r.tokenBias, answering) : options), grammar: r.grammar });
      stop = res.metadata.stopReason;
      if (res.metadata.stopReason === "customStopTrigger") stopSequence = triggerText(res.metadata.customStopTrigger, r.job.stop);
      // Structured output says stop only with an answer that parses; anything cut short is length.
      if (r.grammar && finishReason(stop, 0) === "stop" && !parses(answer)) return result(r, "length", used(), reasoningTokens, []);
    }
    return result(r, finishReason(stop, toolCalls.length), used(), reasoningTokens, toolCalls, stopSequence);
  } finally {
    chat.dispose({ disposeSequence: false });
  }
}

/** The thinking pass: `<think>` forced open, stopped as soon as the thought segment ends. */
async function reasoningPass(chat: LlamaChat, r: GenerateRequest, onReasoning: (c: Chunk) => void) {
  const atEnd = new AbortController();
  const stopBoth = () => atEnd.abort();
  r.signal.addEventListener("abort", stopBoth, { once: true });
  let step = 0;
  const open = r.thinkOpen;
  const bias =
    r.tokenBias ??
    (() => {
      const b = new TokenBias(chat.model.tokenizer);
      if (step < open.length) b.set(open[step]!, { logit: 1000 });
      step++;
      return b;
    });
  try {
    const res = await chat.generateResponse(
      r.history,
      sampling(r, r.maxTokens, bias, (c) => {
        if (c.type !== "segment") return; // nothing but the thought is kept from this pass
        onReasoning(c);
        if (c.segmentEndTime) atEnd.abort();
      }, atEnd.signal),
    );
    const found = res.fullResponse.find((x) => typeof x !== "string" && x.segmentType === "thought");
    const segment = found && typeof found !== "string" ? (found as ChatModelSegment) : null;
    return { segment, stop: res.metadata.stopReason };
  } finally {
    r.signal.removeEventListener("abort", stopBoth);
  }
}

/** History whose last model response is the finished thought, to be continued by the answer. */
function continuing(history: ChatHistoryItem[], thought: ChatModelSegment): ChatHistoryItem[] {
  const last = history.at(-1);
  if (last?.type === "model") return [...history.slice(0, -1), { type: "model", response: [...last.response, thought] }];
  return [...history, { type: "model", response: [thought] }];
}

function sampling(r: GenerateRequest, maxTokens: number, tokenBias: (() => TokenBias) | undefined, onResponseChunk: (c: Chunk) => void, signal = r.signal) {
  const s = r.job.sampling;
  return {
    maxTokens,
    ...samplerOptions(r.job),
    customStopTriggers: r.job.stop.length ? r.job.stop : undefined,
    tokenBias,
    repeatPenalty: s.frequencyPenalty || s.presencePenalty ? { frequencyPenalty: s.frequencyPenalty, presencePenalty: s.presencePenalty } : (false as const),
    signal,
    stopOnAbortSignal: true,
    onResponseChunk,
  };
}

/** A job's sampler settings and context policy, for LlamaChat and the plain loop (plain.ts) alike. */
export function samplerOptions(job: ChatJob) {
  const s = job.sampling;
  return {
    temperature: s.temperature ?? 1,
    topP: s.topP,
    topK: s.topK,
    // without a seed, a fresh one per request: the libraries' own default (the current second) repeats answers
    seed: s.seed ?? freshSeed(),
    // Prompts are counted and refused up front and maxTokens never passes the context, so
    // nothing may be dropped silently: a context shift is an error, not a truncation.
    contextShift: {
      strategy: (): never => {
        throw new Error("context shift is disabled");
      },
    },
  };
}

/**
 * Tool-call arguments as deltas. The grammar lets whitespace trail the arguments; it is held back
 * until more JSON follows, so arguments end at their closing brace in streams and answers alike.
 */
function toolArgsStream(onEvent: (e: EngineEvent) => void) {
  const raw: string[] = [];
  const held: string[] = [];
  return {
    push: (c: { callIndex: number; functionName: string; paramsChunk: string; done: boolean }) => {
      if (raw[c.callIndex] === undefined) {
        raw[c.callIndex] = "";
        held[c.callIndex] = "";
        onEvent({ type: "tool_call", index: c.callIndex, name: c.functionName });
      }
      const text = held[c.callIndex] + c.paramsChunk;
      const body = c.done ? text.trimEnd() : text.replace(/\s+$/, "");
      held[c.callIndex] = c.done ? "" : text.slice(body.length);
      if (body) {
        raw[c.callIndex] += body;
        onEvent({ type: "tool_args", index: c.callIndex, text: body });
      }
    },
    text: (i: number): string | undefined => raw[i],
  };
}

function result(
  r: GenerateRequest,
  finishReason: FinishReason,
  completionTokens: number,
  reasoningTokens: number,
  toolCalls: EngineResult["toolCalls"],
  stopSequence: string | null = null,
): EngineResult {
  return { finishReason, stopSequence, promptTokens: r.promptTokens, completionTokens, reasoningTokens, cachedTokens: r.cachedTokens, toolCalls };
}

/** node-llama-cpp reports the trigger as text pieces and tokens; map it back to the caller's string. */
function triggerText(trigger: readonly (string | Token)[], stops: string[]): string | null {
  const text = trigger.filter((x): x is string => typeof x === "string").join("");
  return stops.find((s) => s === text) ?? stops.find((s) => text.includes(s) || s.includes(text)) ?? (text || null);
}

function parses(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

/** A cut by max_tokens is "length" even inside a tool call (its arguments are then incomplete JSON). */
function finishReason(stop: string, toolCalls: number): FinishReason {
  if (stop === "maxTokens") return "length";
  return toolCalls > 0 ? "tool_calls" : "stop";
}
