import { LlamaText, TokenMeter, type ChatWrapper, type LlamaContextSequence, type LlamaModel, type Token, type TokenBias } from "node-llama-cpp";
import type { ChatJob, EngineEvent, EngineResult } from "../../chat/job";
import { samplerOptions } from "./generate";
import { OutputScanner, type ScannedEvent } from "./output-scanner";

// The plain generation loop: a request with no tools, no response_format, no images, no repeat
// penalties and no answer being continued is generated straight from the rendered prompt by the
// context sequence, without LlamaChat. LlamaChat re-renders the history and runs its function-call,
// segment and stop detectors on every token: on a small model with eight streams that was ~1.7 ms of
// JavaScript between decode steps of ~20-35 ms (issue "chat throughput"). The output is the same:
// the template's stop triggers, the caller's stop strings and the template's thought markers are
// found in the text by OutputScanner (tests compare both loops token for token).

export interface PlainRequest {
  sequence: LlamaContextSequence;
  /** The rendered prompt, exactly as LlamaChat would evaluate it. */
  prompt: readonly Token[];
  markers: PlainMarkers;
  job: ChatJob;
  maxTokens: number;
  cachedTokens: number;
  tokenBias?: () => TokenBias;
  onEvent: (e: EngineEvent) => void;
  signal: AbortSignal;
}

/** The template's stop strings and thought markers in written form (control tokens included). */
export interface PlainMarkers {
  templateStops: string[];
  thought?: { open: string; close: string };
}

/**
 * The markers of a template, or null when its output needs LlamaChat (segments other than a
 * thought, or segments that close all at once).
 */
export function plainMarkers(model: LlamaModel, wrapper: ChatWrapper, stopTriggers: readonly LlamaText[]): PlainMarkers | null {
  const segments = wrapper.settings.segments;
  const kinds = Object.keys(segments ?? {}).filter((k) => k !== "reiterateStackAfterFunctionCalls" && (segments as Record<string, unknown>)[k] != null);
  if (kinds.some((k) => k !== "thought")) return null;
  const written = (t: string | LlamaText) => model.detokenize(LlamaText(t).tokenize(model.tokenizer), true);
  const thought = segments?.thought;
  const text = (x: unknown): x is string | LlamaText => typeof x === "string" || x instanceof LlamaText;
  // a thought opened by the prompt itself, or one without both markers: LlamaChat's case
  if (thought && !(text(thought.prefix) && text(thought.suffix) && written(thought.prefix) && written(thought.suffix))) return null;
  return {
    templateStops: [...new Set(stopTriggers.map(written).filter((s) => s.length > 0))],
    ...(thought && text(thought.prefix) && text(thought.suffix) ? { thought: { open: written(thought.prefix), close: written(thought.suffix) } } : {}),
  };
}

/** Tokens a piece of text may wait for: a character split across tokens (UTF-8) spans at most four. */
const MAX_PARTIAL = 4;

export async function generatePlain(r: PlainRequest): Promise<EngineResult> {
  const { sequence, prompt, job } = r;
  const model = sequence.model;
  const before = sequence.tokenMeter.getState();
  // Align the sequence's cache with the prompt; at least one token is evaluated for the logits.
  await sequence.adaptStateToTokens(prompt.slice(0, -1) as Token[], false);
  const input = prompt.slice(sequence.nextTokenIndex) as Token[];
  const scanner = new OutputScanner({ stops: job.stop, templateStops: r.markers.templateStops, thought: r.markers.thought });
  let generated = 0;
  let pending: Token[] = [];
  const recent: Token[] = [];
  const emit = (events: ScannedEvent[]) => {
    for (const e of events) r.onEvent(e);
  };
  let finish: "stop" | "length" = "stop";
  const tokens = sequence.evaluate(input, { ...samplerOptions(job), tokenBias: r.tokenBias });
  try {
    for await (const token of tokens) {
      generated++;
      pending.push(token);
      let shown = model.detokenize(pending, false, recent);
      const last = generated >= r.maxTokens;
      if (shown.endsWith("\uFFFD")) {
        // a character split across tokens: wait for the rest of it; cut off by max_tokens, the
        // bytes of half a character are not text and are left out (as LlamaChat does)
        if (pending.length < MAX_PARTIAL && !last) continue;
        if (last) shown = shown.replace(/\uFFFD+$/, "");
      }
      // a control token has no shown form: matched by its written one, never shown
      if (shown.length === 0) emit(scanner.push(model.detokenize(pending, true, recent), false, pending.length));
      else emit(scanner.push(shown, true, pending.length));
      recent.push(...pending);
      if (recent.length > MAX_PARTIAL) recent.splice(0, recent.length - MAX_PARTIAL);
      pending = [];
      if (scanner.stop || r.signal.aborted) break;
      if (last) {
        finish = "length";
        break;
      }
    }
  } finally {
    await tokens.return();
  }
  if (pending.length) emit(scanner.push(model.detokenize(pending, false, recent), true, pending.length));
  emit(scanner.finish());
  const stop = scanner.stop;
  return {
    finishReason: stop ? "stop" : finish,
    stopSequence: stop?.custom ? stop.stop : null,
    promptTokens: prompt.length,
    completionTokens: TokenMeter.diff(sequence.tokenMeter, before).usedOutputTokens,
    reasoningTokens: scanner.reasoningTokens,
    cachedTokens: r.cachedTokens,
    toolCalls: [],
  };
}
