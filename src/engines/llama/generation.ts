import type { LlamaModel, Token } from "node-llama-cpp";
import type { ChatJob, EngineEvent, EngineResult, FinishReason } from "../../chat/job";
import type { DecodeLoop, LoopRequest, LoopSlot, LoopStream } from "./decode-loop";
import { OutputScanner, type ScannerOptions } from "./output-scanner";

// One request's generation on one slot, every kind of request alike (issue 29): the rendered prompt
// goes to the context's decode loop (decode-loop.ts), which samples under the request's grammar
// natively (a response_format's schema; tool calls under a lazy grammar that starts at the call
// syntax; a schema after thinking, lazy from the thought's end), and the tokens are split here into
// text, reasoning and tool calls by OutputScanner, which also finds stop strings. Replaces
// node-llama-cpp's LlamaChat, which re-rendered the history and ran its detectors on every token and
// decoded through node-llama-cpp's own queue beside the step loop.

export interface GenerationRequest {
  loop: DecodeLoop;
  slot: LoopSlot;
  model: LlamaModel;
  /** The rendered prompt. */
  prompt: readonly Token[];
  /** Prompt tokens the slot's cache keeps (an image prompt's are decoded up to its last image). */
  nPast: number;
  scanner: ScannerOptions;
  job: ChatJob;
  maxTokens: number;
  cachedTokens: number;
  /** Sampling settings, bias and penalties, grammar (maxTokens is set here). */
  request: Omit<LoopRequest, "maxTokens">;
  /**
   * A response_format's JSON answer: the finish is "length" unless the answer parses, and a thought
   * the model ends before its closing marker is closed here and answered under `gbnf` (issue 24:
   * structured output after thinking never ends empty).
   */
  schema?: { gbnf: string; closeThought: readonly Token[] };
  /**
   * One call at most (parallel_tool_calls false, or a named function): generation ends as soon as
   * its arguments are complete, as node-llama-cpp's LlamaChat ended it, without the call's suffix
   * and end of turn.
   */
  oneCall?: boolean;
  onEvent: (e: EngineEvent) => void;
  signal: AbortSignal;
}

/** Tokens a piece of text may wait for: a character split across tokens (UTF-8) spans at most four. */
const MAX_PARTIAL = 4;

export async function generateOnLoop(r: GenerationRequest): Promise<EngineResult> {
  const { model, job } = r;
  const scanner = new OutputScanner(r.scanner);
  let answer = "";
  const emit = (events: ReturnType<OutputScanner["push"]>) => {
    for (const e of events) {
      if (e.type === "text") answer += e.text;
      r.onEvent(e);
    }
  };
  let sampled = 0;
  let cut = false; // by max_tokens
  const run = async (stream: LoopStream, budget: number): Promise<"eog" | "max" | "stopped"> => {
    let pending: Token[] = [];
    const recent: Token[] = [];
    let count = 0;
    try {
      for await (const t of stream) {
        const token = t as Token;
        count++;
        sampled++;
        pending.push(token);
        let shown = model.detokenize(pending, false, recent);
        const last = count >= budget;
        if (shown.endsWith("\uFFFD")) {
          // a character split across tokens: wait for the rest of it; cut off by max_tokens, the
          // bytes of half a character are not text and are left out
          if (pending.length < MAX_PARTIAL && !last) continue;
          if (last) shown = shown.replace(/\uFFFD+$/, "");
        }
        // a control token has no shown form: matched by its written one, never shown
        if (shown.length === 0) emit(scanner.push(model.detokenize(pending, true, recent), false, pending.length));
        else emit(scanner.push(shown, true, pending.length));
        recent.push(...pending);
        if (recent.length > MAX_PARTIAL) recent.splice(0, recent.length - MAX_PARTIAL);
        pending = [];
        if (scanner.stop || r.signal.aborted || (r.oneCall && scanner.callComplete)) return "stopped";
      }
    } finally {
      await stream.return();
      if (pending.length) emit(scanner.push(model.detokenize(pending, false, recent), true, pending.length));
    }
    const end = stream.end;
    if (end?.reason === "eog") sampled++; // sampled, never shown
    return end?.reason === "max" ? "max" : "eog";
  };

  const first = r.loop.generate(r.slot, r.prompt.slice(r.nPast), r.nPast, { ...r.request, maxTokens: r.maxTokens });
  let ended = await run(first, r.maxTokens);
  if (ended === "max") cut = true;
  // The thought ended by end-of-generation before its closing marker: closed here, then answered under the schema.
  if (ended === "eog" && r.schema && scanner.inThought && !r.signal.aborted) {
    const left = r.maxTokens - sampled;
    if (left <= 0) cut = true;
    else {
      emit(scanner.push(model.detokenize(r.schema.closeThought as Token[], true), false, 0));
      const nPast = r.slot.cached.length;
      // the answer's grammar from its first token: the closing marker is in the prompt now, never in the output
      const { lazyPatterns: _, lazyTokens: __, forced: ___, ...rest } = r.request;
      const second = r.loop.generate(r.slot, r.schema.closeThought, nPast, { ...rest, grammar: r.schema.gbnf, maxTokens: left });
      ended = await run(second, left);
      if (ended === "max") cut = true;
    }
  }
  emit(scanner.finish());
  const stop = scanner.stop;
  const calls = scanner.calls;
  // after calls, the template's end of turn written as text is the calls' end, not a stop
  let finishReason: FinishReason = stop?.custom ? "stop" : cut ? "length" : calls.length > 0 ? "tool_calls" : "stop";
  // Structured output says stop only with an answer that parses; anything cut short is length.
  if (r.schema && finishReason === "stop" && !stop && calls.length === 0 && !parses(answer)) finishReason = "length";
  return {
    finishReason,
    stopSequence: stop?.custom ? stop.stop : null,
    promptTokens: r.prompt.length,
    completionTokens: sampled,
    reasoningTokens: scanner.reasoningTokens,
    cachedTokens: r.cachedTokens,
    toolCalls: calls.map((c) => ({ name: c.name, arguments: c.arguments })),
  };
}

function parses(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

/** A job's sampling settings for the loop: a fresh seed where the request names none. */
export function loopSampling(job: ChatJob, seed: () => number): Pick<LoopRequest, "temperature" | "topK" | "topP" | "seed" | "frequencyPenalty" | "presencePenalty"> {
  const s = job.sampling;
  return {
    temperature: s.temperature ?? 1,
    ...(s.topK !== undefined ? { topK: s.topK } : {}),
    ...(s.topP !== undefined ? { topP: s.topP } : {}),
    // without a seed, a fresh one per request: the libraries' own default (the current second) repeats answers
    seed: s.seed === undefined ? seed() : Math.max(0, Math.floor(s.seed)) % 2 ** 32,
    ...(s.frequencyPenalty ? { frequencyPenalty: s.frequencyPenalty } : {}),
    ...(s.presencePenalty ? { presencePenalty: s.presencePenalty } : {}),
  };
}

/**
 * A seed for a request that names none. Both llama.cpp's sampler and node-llama-cpp's fall back to
 * the current second, so identical requests in one second would draw identical tokens: a client
 * retrying a failed answer would get the same failure again.
 */
export function freshSeed(): number {
  return crypto.getRandomValues(new Uint32Array(1))[0]!;
}
