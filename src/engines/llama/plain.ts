import { LlamaText, TokenBias, TokenMeter, type ChatWrapper, type LlamaContext, type LlamaContextSequence, type LlamaModel, type Token } from "node-llama-cpp";
import type { ChatJob, EngineEvent, EngineResult } from "../../chat/job";
import { samplerOptions } from "./generate";
import { biasFollower, createNativeSampler, nativeSampling, sampleInStep } from "./native-sampler";
import { OutputScanner, type ScannedEvent } from "./output-scanner";
import type { StepLoop } from "./step-loop";
import { biasArrays } from "./token-bias";

// The plain generation loop: a request with no tools, no response_format, no images, no repeat
// penalties and no answer being continued is generated straight from the rendered prompt by the
// context sequence, without LlamaChat. LlamaChat re-renders the history and runs its function-call,
// segment and stop detectors on every token: on a small model with eight streams that was ~1.7 ms of
// JavaScript between decode steps of ~20-35 ms (issue "chat throughput"). The output is the same:
// the template's stop triggers, the caller's stop strings and the template's thought markers are
// found in the text by OutputScanner (tests compare both loops token for token). Where the llama
// addon is built, the tokens come from the context's step loop (step-loop.ts: decode steps driven
// directly, sampled natively), or, for a model whose cache needs node-llama-cpp's checkpoints,
// from stepTokens below (steps through node-llama-cpp's queue, sampled natively); elsewhere from
// `sequence.evaluate`.

export interface PlainRequest {
  sequence: LlamaContextSequence;
  /** The sequence's context: with it, tokens are sampled by the llama addon where it is built. */
  context?: LlamaContext;
  /** The context's step loop: with it (and `context`), it decodes the tokens. */
  loop?: StepLoop;
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
  // Align the sequence's cache with the prompt; at least one token is evaluated for the logits.
  await sequence.adaptStateToTokens(prompt.slice(0, -1) as Token[], false);
  const input = prompt.slice(sequence.nextTokenIndex) as Token[];
  const evaluate = () => sequence.evaluate(input, { ...samplerOptions(job), tokenBias: r.tokenBias });
  const scanner = new OutputScanner({ stops: job.stop, templateStops: r.markers.templateStops, thought: r.markers.thought });
  let generated = 0;
  let pending: Token[] = [];
  const recent: Token[] = [];
  const emit = (events: ScannedEvent[]) => {
    for (const e of events) r.onEvent(e);
  };
  let finish: "stop" | "length" = "stop";
  const tokens = (r.context && (loopTokens(r, input) || stepTokens(r.context, sequence, input, job, r.tokenBias))) || evaluate();
  // Ended by an end-of-generation token (sampled, so counted, never shown) rather than by a break.
  let ranOut = true;
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
      if (scanner.stop || r.signal.aborted) {
        ranOut = false;
        break;
      }
      if (last) {
        finish = "length";
        ranOut = false;
        break;
      }
    }
  } finally {
    await tokens.return(undefined);
  }
  if (pending.length) emit(scanner.push(model.detokenize(pending, false, recent), true, pending.length));
  emit(scanner.finish());
  const stop = scanner.stop;
  return {
    finishReason: stop ? "stop" : finish,
    stopSequence: stop?.custom ? stop.stop : null,
    promptTokens: prompt.length,
    // every token sampled for the answer: the step loop may have decoded one more (step-loop.ts)
    completionTokens: generated + (ranOut ? 1 : 0),
    reasoningTokens: scanner.reasoningTokens,
    cachedTokens: r.cachedTokens,
    toolCalls: [],
  };
}

/** The tokens from the context's step loop, sampled by the llama addon; null where either is missing. */
function loopTokens(r: PlainRequest, input: Token[]): AsyncGenerator<Token> | null {
  if (!r.loop || !r.context) return null;
  const sampler = nativeSamplerFor(r.context, r.sequence, r.job);
  if (!sampler) return null;
  return r.loop.open({ sequence: r.sequence, input, sampler, tokenBias: r.tokenBias, maxTokens: r.maxTokens });
}

function nativeSamplerFor(context: LlamaContext, sequence: LlamaContextSequence, job: ChatJob) {
  const o = samplerOptions(job);
  return createNativeSampler(sequence.model, context, { temperature: o.temperature, topK: o.topK, topP: o.topP, seed: o.seed });
}

/** node-llama-cpp's internals stepTokens drives (LlamaContextSequence, 3.22). */
interface SequenceInternals {
  _decodeTokens(
    tokens: Token[],
    logits: boolean[],
    evaluationPriority: number,
    tokenMeter: TokenMeter,
    contextShift: { size: number; strategy: (o: unknown) => unknown },
    logitDataMapper: (batchLogitIndex: number) => number | Promise<number>,
    afterBatchAction?: (sequenceStateLength: number) => unknown,
  ): Promise<(number | undefined)[]>;
  _tokenMeter: TokenMeter;
  _takeIntervalCheckpointIfNeededAfterBatch?: (sequenceStateLength: number) => unknown;
}

const hasStepInternals = (sequence: LlamaContextSequence) => {
  const seq = sequence as unknown as Partial<SequenceInternals>;
  return typeof seq._decodeTokens === "function" && seq._tokenMeter instanceof TokenMeter;
};

/** Why plain requests on `sequence`'s context cannot sample through the llama addon, or null if they can. */
export function nativeStepsUnavailable(sequence: LlamaContextSequence): string | null {
  if (!nativeSampling()) return "the llama addon is not built, or is an older build without sampling (./install.sh builds it)";
  if (!hasStepInternals(sequence)) return "this node-llama-cpp lacks the sequence internals the step loop drives";
  if (!biasArrays(new TokenBias(sequence.model.tokenizer))) return "this node-llama-cpp keeps token biases where the step loop cannot read them";
  return null;
}

/** node-llama-cpp's default evaluation priority (what `evaluate` uses). */
const PRIORITY = 5;

/**
 * The generated tokens, one decode step at a time, sampled by the llama addon — what
 * `sequence.evaluate` does, without its per-token sampler configuration and async sampling
 * worker (~1.9 ms a step for eight streams). Ends at an end-of-generation token, as `evaluate`
 * does. Null (the caller evaluates) where the addon or these internals are missing. The slot's
 * lease makes this the sequence's only user, which is what `evaluate`'s lock ensures.
 */
function stepTokens(context: LlamaContext, sequence: LlamaContextSequence, input: Token[], job: ChatJob, tokenBias?: () => TokenBias): AsyncGenerator<Token> | null {
  if (!hasStepInternals(sequence)) return null;
  const seq = sequence as unknown as SequenceInternals;
  const options = samplerOptions(job);
  const sampler = nativeSamplerFor(context, sequence, job);
  if (!sampler) return null;
  const model = sequence.model;
  const shift = { size: 1, strategy: options.contextShift.strategy };
  const afterBatch = seq._takeIntervalCheckpointIfNeededAfterBatch?.bind(sequence);
  const followBias = biasFollower(sampler);
  return (async function* () {
    let tokens = input;
    try {
      for (;;) {
        // asked for before every token, as evaluate does
        followBias(tokenBias?.());
        const logits: boolean[] = [];
        logits[tokens.length - 1] = true;
        const out = await seq._decodeTokens.call(sequence, tokens, logits, PRIORITY, seq._tokenMeter, shift, (i) => sampleInStep(sampler, i), afterBatch);
        const next = out[tokens.length - 1];
        if (next === undefined || next < 0) throw new Error("the model gave no logits to sample the next token from");
        if (model.isEogToken(next as Token)) return;
        yield next as Token;
        tokens = [next as Token];
      }
    } finally {
      sampler.dispose();
    }
  })();
}
