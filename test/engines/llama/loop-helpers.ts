import type { LlamaModel } from "node-llama-cpp";
import type { ChatJob, EngineEvent } from "../../../src/3-engines/chat-job";
import type { LlamaChatEngine } from "../../../src/3-engines/llama/chat-engine";
import type { DecodeLoop } from "../../../src/3-engines/llama/decode-loop";

// What the decode loop's tests share: running a job on an engine, the engine's loop, holding it.

/** Runs one job to its end on `e`: its text and what the engine said of it. */
export async function run(e: LlamaChatEngine, j: ChatJob, signal = new AbortController().signal, onEvent?: (e: EngineEvent) => void, batch = false) {
  const prepared = await e.prepare(j);
  const lease = await prepared.acquire(undefined, { batch });
  let text = "";
  try {
    const result = await lease.run((ev) => {
      if (ev.type === "text") text += ev.text;
      onEvent?.(ev);
    }, signal);
    return { text, finishReason: result.finishReason, completionTokens: result.completionTokens, cachedTokens: result.cachedTokens, promptTokens: result.promptTokens };
  } finally {
    lease.release();
  }
}

export const loopOf = (e: LlamaChatEngine) => (e as unknown as { state: { loop: DecodeLoop } }).state.loop;

/** The loop takes no step for `ms`: what is submitted meanwhile shares its steps from the first. */
export function holdLoop(e: LlamaChatEngine, ms: number): void {
  (loopOf(e).handle as { hold(ms: number): void }).hold(ms);
}

/**
 * Sampling that never ends the turn: a request runs to max_tokens. On the tiny model a step takes
 * a fraction of a millisecond, so a request of a few tokens is over before a second one, submitted
 * in the same tick, reaches the loop on a busy machine (measured: 2-7 ms of JavaScript between two
 * submissions); long requests overlap whatever the load.
 */
export async function noEnd(e: LlamaChatEngine) {
  await e.load();
  const model = (e as unknown as { state: { model: LlamaModel } }).state.model;
  return { temperature: 0, logitBias: new Map(["<|im_end|>", "<|endoftext|>"].map((t) => [model.tokenize(t, true)[0]!, -100])) };
}

/**
 * Watches `e`'s loop events until `stop()`: each carries the step it came in (a token: the decode
 * that gave it), so when each sequence's tokens came is known exactly, however late JavaScript
 * sees them. `tokens.get(seq)`: the steps of its tokens, in order (the last one, at max tokens, is
 * its end); `submitted`: the sequences of the requests, in the order they reached the loop.
 */
export async function watchSteps(e: LlamaChatEngine) {
  await e.load();
  const loop = loopOf(e) as unknown as { onEvents(events: Int32Array): void; start(slot: { seq: number }, ...rest: unknown[]): void };
  const deliver = loop.onEvents;
  const start = loop.start;
  const submitted: number[] = [];
  loop.start = (slot, ...rest) => {
    submitted.push(slot.seq);
    start.call(loop, slot, ...rest);
  };
  const tokens = new Map<number, number[]>();
  const ends = new Map<number, number>();
  loop.onEvents = (events: Int32Array) => {
    for (let i = 0; i < events.length; i += 5) {
      const [seq, , kind, , step] = events.subarray(i, i + 5);
      if (kind === 0) tokens.set(seq!, [...(tokens.get(seq!) ?? []), step!]);
      else ends.set(seq!, step!);
    }
    deliver.call(loop, events);
  };
  return {
    tokens,
    ends,
    submitted,
    stop: () => {
      loop.onEvents = deliver;
      loop.start = start;
    },
  };
}
