import type { LlamaModel, Token } from "node-llama-cpp";
import type { ChatJob, EngineEvent, EngineResult, FinishReason } from "../chat-job";
import type { DecodeLoop, LoopRequest, LoopSlot, LoopStream } from "./decode-loop";
import { OutputScanner, type ScannedEvent, type ScannerOptions } from "./output-scanner";
import { OutputText, type TokenPieces } from "./token-text";

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
  /** The model's token texts (the output is joined from them as it streams). */
  pieces: TokenPieces;
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
   * Beside tools: free text that begins no call within FREE_TEXT_BEFORE_SCHEMA tokens (or ends
   * first) is not the answer; it is dropped and the answer generated under `schema`.
   */
  answerAfterFreeText?: boolean;
  /**
   * One call at most (parallel_tool_calls false, or a named function): generation ends as soon as
   * its arguments are complete, as node-llama-cpp's LlamaChat ended it, without the call's suffix
   * and end of turn.
   */
  oneCall?: boolean;
  onEvent: (e: EngineEvent) => void;
  signal: AbortSignal;
}

/** Free text a model may write beside tools and a schema before it is taken as answering, not calling (web/docs/api-chat.md: a choice). */
export const FREE_TEXT_BEFORE_SCHEMA = 24;

type Ended = "eog" | "max" | "stopped" | "undecided";

export async function generateOnLoop(r: GenerationRequest): Promise<EngineResult> {
  const { model } = r;
  let scanner = new OutputScanner(r.scanner);
  let reasoningBefore = 0; // of a pass whose scanner was replaced
  let answer = "";
  // Beside tools and a schema, free text is not the answer: it is held back until a call begins
  // (it is then the text before the call) or it is taken as answering (then dropped, and the answer
  // generated under the schema).
  let deciding = r.answerAfterFreeText === true && r.schema !== undefined;
  let held: ScannedEvent[] = [];
  const show = (e: ScannedEvent) => {
    if (e.type === "text") answer += e.text;
    r.onEvent(e);
  };
  const emit = (events: ScannedEvent[]) => {
    if (deciding && (scanner.callOpen || scanner.calls.length > 0)) {
      deciding = false;
      for (const e of held) show(e);
      held = [];
    }
    for (const e of events) {
      if (deciding && e.type === "text") held.push(e);
      else show(e);
    }
  };
  let sampled = 0;
  let cut = false; // by max_tokens
  /** The first pass's tokens, and how many of them came before its free text (a thought's, up to its close). */
  const firstPass: Token[] = [];
  let freeFrom = 0;
  const run = async (stream: LoopStream, budget: number, record: Token[] | null): Promise<Ended> => {
    const text = new OutputText(r.pieces);
    let count = 0;
    // A client that leaves stops the request at once, in its prompt's decoding too (issue 41: a
    // 47k-token prompt abandoned after 2 s ran on for 30 s); tokens only come after the prompt.
    const stop = () => stream.cancel();
    if (r.signal.aborted) stop();
    else r.signal.addEventListener("abort", stop, { once: true });
    try {
      for await (const t of stream) {
        const token = t as Token;
        count++;
        sampled++;
        record?.push(token);
        const piece = text.push(token, count >= budget);
        if (!piece) continue; // a character split across tokens: the rest of it is still to come
        const wasInThought = scanner.inThought;
        emit(scanner.push(piece.text, piece.visible, piece.tokens));
        if (deciding) {
          if (scanner.inThought || wasInThought) freeFrom = count;
          // a stop string in free text ends the free text, not the answer
          else if (scanner.stop || count - freeFrom > FREE_TEXT_BEFORE_SCHEMA) return "undecided";
        }
        if (scanner.stop || r.signal.aborted || (r.oneCall && scanner.callComplete)) return "stopped";
      }
    } finally {
      r.signal.removeEventListener("abort", stop);
      await stream.return();
      const rest = text.end();
      if (rest) emit(scanner.push(rest.text, rest.visible, rest.tokens));
    }
    const end = stream.end;
    if (end?.reason === "eog") sampled++; // sampled, never shown
    return end?.reason === "max" ? "max" : "eog";
  };
  /** Generates under the schema after `prefix` (the slot's cache reused as far as it holds it), with the budget left. */
  const answerUnderSchema = async (prefix: readonly Token[]) => {
    const left = r.maxTokens - sampled;
    if (left <= 0) {
      cut = true;
      return;
    }
    const nPast = Math.min(r.slot.commonPrefix(prefix), prefix.length - 1);
    // the answer's grammar from its first token: no trigger (a thought's close is in its prompt), nothing forced
    const { lazyPatterns: _, lazyTokens: __, forced: ___, ...rest } = r.request;
    const again = r.loop.generate(r.slot, prefix.slice(nPast), nPast, { ...rest, grammar: r.schema!.gbnf, maxTokens: left });
    if ((await run(again, left, null)) === "max") cut = true;
  };

  const first = r.loop.generate(r.slot, r.prompt.slice(r.nPast), r.nPast, { ...r.request, maxTokens: r.maxTokens });
  const ended = await run(first, r.maxTokens, firstPass);
  // cancelled before its first token: only the part of the prompt decoded by then was done
  const promptDone = first.end?.reason === "cancelled" && sampled === 0 ? Math.min(r.prompt.length, Math.max(first.end.nPast, r.nPast)) : r.prompt.length;
  if (ended === "max") cut = true;
  // (cut by max_tokens or aborted while deciding: the free text stays unshown)
  if (r.schema && !r.signal.aborted && ended !== "max") {
    const undecided = deciding;
    deciding = false;
    if (ended === "eog" && scanner.inThought) {
      // The thought ended by end-of-generation before its closing marker: closed here, then answered under the schema.
      emit(scanner.push(model.detokenize(r.schema.closeThought as Token[], true), false, 0));
      await answerUnderSchema([...(r.slot.cached as Token[]), ...r.schema.closeThought]);
    } else if (undecided) {
      // Free text beside tools (no call begun): dropped, and the answer generated after the thought.
      held = [];
      reasoningBefore = scanner.reasoningTokens;
      scanner = new OutputScanner({ stops: r.scanner.stops, templateStops: r.scanner.templateStops });
      await answerUnderSchema([...r.prompt, ...firstPass.slice(0, freeFrom)]);
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
    promptTokens: promptDone,
    completionTokens: sampled,
    reasoningTokens: reasoningBefore + scanner.reasoningTokens,
    // a copy of another slot's cache counts (decode-loop.ts share); image positions primed for this request do not
    cachedTokens: Math.max(r.cachedTokens, first.copied),
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
