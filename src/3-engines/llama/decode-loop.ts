import type { LlamaContext, LlamaModel } from "node-llama-cpp";
import { ApiError } from "../../lib/errors";
import { GRAMMAR_BUDGET } from "./grammar-budget";
import { llamaAddon } from "./native/addon-path";
import { nativeContext, nativeModel } from "./native/handles";

// A chat context's decode loop (native/loop.cpp): a native thread owns the llama_context, batches
// every slot with tokens to decode, decodes, samples each slot with its own sampler chain and
// grammar, and hands the tokens here as they come, so nothing in JavaScript runs between two decode
// steps (issue 29). Through node-llama-cpp's queue and then a JavaScript step loop, ~0.3-1.5 ms of
// JavaScript sat between steps; on a fast step (a GPU's, or a small model's) that was a large share.
//
// This module keeps each slot's record of its cache (the tokens in it), which a request's prompt is
// compared with to reuse its prefix: the loop trims the cache to the part a new request shares.

/** How a request's tokens are drawn and bounded (sampler.cpp's chain order; a seeded request draws the same tokens). */
export interface LoopRequest {
  /** Tokens to generate at most; 0: decode the input only (prefill). */
  maxTokens: number;
  /** Batch work gives way to live requests (live prompts first; narrow steps beside live traffic). */
  batch?: boolean;
  temperature?: number;
  topK?: number;
  topP?: number;
  seed?: number;
  biasTokens?: Uint32Array;
  biasLogits?: Float32Array;
  frequencyPenalty?: number;
  presencePenalty?: number;
  penaltyLastN?: number;
  /**
   * GBNF; with `lazyTokens` or `lazyPatterns`, applied from the first such token, or the first
   * pattern's match (llama.cpp's lazy grammar; it searches the whole output with std::regex after
   * every token: keep patterns literal, never `[\s\S]*`, which overflowed the stack on long outputs).
   */
  grammar?: string;
  lazyTokens?: Uint32Array;
  lazyPatterns?: string[];
  /** The k-th generated token gets +1000 on `forced[k]` (a grammar still wins). */
  forced?: Uint32Array;
  /**
   * The prompt is text only (its tokens alone say what is cached; an image's placeholder tokens do
   * not): it may start from a copy of another slot's cache that holds more of it (see `share`).
   */
  copyable?: boolean;
}

export type LoopEndReason = "eog" | "max" | "cancelled" | "prefilled";

export interface LoopEnd {
  reason: LoopEndReason;
  /** The last token sampled (end of generation: not shown; max tokens: shown), or -1. */
  token: number;
  /** Tokens of the sequence in the cache at the end (a cancelled prompt: as far as it was decoded). */
  nPast: number;
}

interface NativeLoop {
  /** Returns the request's id, which a cancel names. */
  submit(seq: number, tokens: Uint32Array, nPast: number, request: LoopRequest & { copyFrom?: number }): number;
  copyWorth(): number;
  cancel(seq: number, id: number): void;
  stats(): LoopStats;
  records(afterStep: number): Float64Array;
  close(): void;
}
export interface LoopStats {
  steps: number;
  tokens: number;
  flushes: number;
  decodeMs: number;
  sampleMs: number;
  loopMs: number;
}
/** One decode step as the loop ran it (native StepRecord): what the scheduling tests read. */
export interface StepRecord {
  step: number;
  /** Slots that took their one token: a generated one, or a prompt's last. */
  generating: number;
  /** Of them, live requests' generated tokens. */
  live: number;
  /** Prompt tokens in the step (beyond each prompt's last token) and the slots they came from. */
  prompt: number;
  prompts: number;
  /** Prompt tokens the step could carry beside a live generating slot; -1: not bounded (a plan). */
  budget: number;
  decodeMs: number;
  stepMs: number;
}
const RECORD_FIELDS = 8;
interface Addon {
  DecodeLoop: new (
    model: unknown,
    context: unknown,
    onEvents: (events: Int32Array) => void,
    options: { batchWidthBesideLive: number; quietMs: number; gapLimit: number; promptSlowdown?: number; grammarStatesMax: number; grammarMsPerToken: number; grammarMsAllowance: number },
  ) => NativeLoop;
  scoreContinuations(loop: NativeLoop, seq: number, nPast: number, last: number, continuations: Uint32Array[], biasTokens?: Uint32Array, biasLogits?: Float32Array): Promise<Float64Array>;
}

/** A step beside a live stream takes at most about this many times the stream's step alone (issue 46). */
export const DEFAULT_GAP_LIMIT = 3;

const KIND = ["token", "eog", "max", "cancelled", "error", "prefilled"] as const;
const ERRORS: Record<number, string> = {
  [-1]: "the sequence was still generating for another request",
  [-2]: "the grammar could not go on (llama.cpp refused every token)",
  [-3]: "the context window is full",
  [-4]: "the model gave no logits to sample the next token from",
  [-5]: "the decode loop closed",
};

/** The error a request's end carries: a named 400 for a grammar over its budget, else a plain failure. */
function loopError(code: number, budget: typeof GRAMMAR_BUDGET): Error {
  if (code === -6)
    return new ApiError(
      "schema_too_complex",
      `the grammar of this request's schema grew past ${budget.statesMax} parse states while generating (nested repetitions, or alternatives that share their start): simplify the schema`,
    );
  if (code === -7)
    return new ApiError(
      "schema_too_complex",
      `the grammar of this request's schema took more than ${budget.msPerToken} ms a token to follow while generating (many enum values or alternatives that share their start): simplify the schema`,
    );
  return new Error(ERRORS[code] ?? `llama.cpp failed to decode (code ${code})`);
}

/** Why a context cannot run the loop here, or null if it can. */
export function decodeLoopUnavailable(): string | null {
  const addon = llamaAddon<Partial<Addon>>();
  if (!addon) return "the llama addon is not built (./install.sh builds it; it needs cmake and a C++ compiler)";
  if (typeof addon.DecodeLoop !== "function") return "the llama addon is an older build without the decode loop: run ./install.sh";
  return null;
}

/** One slot of the context: its sequence id and what its cache holds. */
export class LoopSlot {
  /** The tokens in this sequence's cache, in order. */
  cached: number[] = [];
  /** Another request may not start on it before the last one's end was recorded. */
  busy: Promise<void> = Promise.resolve();
  constructor(readonly seq: number) {}

  /** Tokens at the start of `tokens` this slot's cache already holds. */
  commonPrefix(tokens: readonly number[]): number {
    const c = this.cached;
    const n = Math.min(c.length, tokens.length);
    let i = 0;
    while (i < n && c[i] === tokens[i]) i++;
    return i;
  }
}

interface Running {
  slot: LoopSlot;
  /** The loop's id for the request (0 until submitted). */
  id: number;
  /** The tokens submitted and emitted since, as they go into the cache. */
  record: number[];
  /** Prompt tokens it started from in a copy of another slot's cache (0: none copied). */
  copied: number;
  /** Its first token came: the slot's record shows its prompt in the cache. */
  primed: boolean;
  queue: number[];
  end: LoopEnd | null;
  error: Error | null;
  wake: (() => void) | null;
  ended: () => void;
}

export class DecodeLoop {
  private readonly native: NativeLoop;
  private readonly running = new Map<number, Running>();
  private closed = false;
  /** The context's slots whose caches a copyable prompt may start from (`share`). */
  private peers: readonly LoopSlot[] = [];
  /** The fewest prompt tokens a copy must save (native copyWorth: the copy moves a slot's whole cache). */
  private worth = Infinity;

  /** What one request's grammar may cost (GRAMMAR_BUDGET; tests lower it). */
  private readonly budget: typeof GRAMMAR_BUDGET;

  /**
   * gapLimit: beside a live request that is generating, a step carries as many prompt tokens as keep
   * it within about this many times a step of the generating slots alone (measured as the loop runs);
   * 0: prompts take whole plans of up to 2,048 tokens, as llama-server's batch. promptSlowdown: how
   * much dearer a token of the prompt may get to keep to it (default 1.1: a long prompt beside a
   * stream reads about as fast as alone; where the device cannot do both, the gap gives way).
   */
  constructor(
    model: LlamaModel,
    context: LlamaContext,
    o: { batchWidthBesideLive: number; quietMs?: number; gapLimit?: number; promptSlowdown?: number; grammarBudget?: Partial<typeof GRAMMAR_BUDGET> },
  ) {
    const addon = llamaAddon<Addon>();
    const why = decodeLoopUnavailable();
    if (why || !addon) throw new Error(why ?? "the llama addon is not built");
    this.budget = { ...GRAMMAR_BUDGET, ...o.grammarBudget };
    this.native = new addon.DecodeLoop(nativeModel(model), nativeContext(context), (events) => this.onEvents(events), {
      batchWidthBesideLive: Number.isFinite(o.batchWidthBesideLive) ? o.batchWidthBesideLive : 1e9,
      quietMs: o.quietMs ?? 2000,
      gapLimit: o.gapLimit ?? DEFAULT_GAP_LIMIT,
      ...(o.promptSlowdown !== undefined ? { promptSlowdown: o.promptSlowdown } : {}),
      grammarStatesMax: this.budget.statesMax,
      grammarMsPerToken: this.budget.msPerToken,
      grammarMsAllowance: this.budget.msAllowance,
    });
  }

  /**
   * Lets a copyable prompt start from a copy of another of `slots`' caches, when that one holds at
   * least copyWorth() more of it than its own slot (busy or not: what a running request kept of its
   * slot's cache is in it until that request ends). Several agents' requests with one long system
   * prompt, or a tool list, prefill it once, not once per slot. Only for a cache that can drop a
   * tail (the copy is trimmed to the shared part).
   */
  share(slots: readonly LoopSlot[]): void {
    this.peers = slots;
    this.worth = this.native.copyWorth();
  }

  /** The fewest prompt tokens a copy of another slot's cache must save (Infinity until `share`). */
  get copyWorth(): number {
    return this.worth;
  }

  /** The native loop, for the projector's image decodes (mtmd-addon.cpp runs them on its thread). */
  get handle(): unknown {
    return this.native;
  }

  stats(): LoopStats {
    return this.native.stats();
  }

  /** The steps after `afterStep` the loop ran, of its last 4,096, in order. */
  records(afterStep = 0): StepRecord[] {
    const f = this.native.records(afterStep);
    const out: StepRecord[] = [];
    for (let i = 0; i + RECORD_FIELDS <= f.length; i += RECORD_FIELDS)
      out.push({ step: f[i]!, generating: f[i + 1]!, live: f[i + 2]!, prompt: f[i + 3]!, prompts: f[i + 4]!, budget: f[i + 5]!, decodeMs: f[i + 6]!, stepMs: f[i + 7]! });
    return out;
  }

  /**
   * The tokens generated for `tokens` (the prompt, or its part after the first `nPast` tokens the
   * slot's cache keeps), one per step as they come, ending at an end of generation or max tokens;
   * `end()` says which. Stopping early (`return()`, a break) cancels and waits until the loop let
   * go of the slot, so its cache record is exact before the slot goes to another request.
   */
  generate(slot: LoopSlot, tokens: readonly number[], nPast: number, request: LoopRequest): LoopStream {
    return new LoopStream(this, slot, tokens, nPast, request);
  }

  /** Decodes `tokens` after the first `nPast` of the slot's cache, generating nothing; resolves once they are in. */
  async prefill(slot: LoopSlot, tokens: readonly number[], nPast: number, batch: boolean): Promise<void> {
    if (tokens.length === 0) return this.trim(slot, nPast);
    const stream = this.generate(slot, tokens, nPast, { maxTokens: 0, batch });
    for await (const _ of stream);
  }

  /**
   * The log-probability the model gives each continuation after `prompt` (native/score.cpp): the
   * prompt's part after the first `nPast` tokens of the slot's cache is read in the loop's steps,
   * beside the other requests; its last token and the continuations' tree are decoded between two
   * steps, each shared prefix once. The slot's cache then holds the prompt, for the next question.
   */
  async score(slot: LoopSlot, prompt: readonly number[], nPast: number, continuations: readonly (readonly number[])[], o: { batch: boolean; bias?: { tokens: Uint32Array; logits: Float32Array } }): Promise<Float64Array> {
    if (prompt.length === 0) throw new Error("score: an empty prompt");
    const head = prompt.slice(0, -1);
    await this.prefill(slot, head.slice(Math.min(nPast, head.length)), Math.min(nPast, head.length), o.batch);
    const addon = llamaAddon<Addon>()!;
    slot.cached = [];  // until it is done: what the cache holds is known again only then
    const out = await addon.scoreContinuations(this.native, slot.seq, head.length, prompt.at(-1)!, continuations.map((c) => Uint32Array.from(c)), o.bias?.tokens, o.bias?.logits);
    slot.cached = [...prompt];
    return out;
  }

  /** Drops the slot's cache after `nPast` in its record; the loop trims the cache itself at the next submit. */
  trim(slot: LoopSlot, nPast: number): void {
    if (slot.cached.length > nPast) slot.cached.length = nPast;
  }

  /** @internal */
  start(slot: LoopSlot, tokens: readonly number[], nPast: number, request: LoopRequest, r: Running): void {
    if (this.closed) throw new Error(ERRORS[-5]);
    if (this.running.has(slot.seq)) throw new Error(ERRORS[-1]);
    if (nPast < 0 || nPast > slot.cached.length) throw new Error(`the slot's cache holds ${slot.cached.length} tokens, not ${nPast}`);
    const { copyable, ...native } = request;
    // what the cache will hold once the prompt is in: the record, whatever it starts from
    const prompt = [...slot.cached.slice(0, nPast), ...tokens];
    let from: LoopSlot | null = null;
    if (copyable && this.peers.length > 1) {
      // Decided here, as the request is submitted: the records say what each cache holds now,
      // and a later request that trims the source reaches the loop after this one.
      let most = nPast + this.worth - 1;
      for (const p of this.peers) {
        if (p === slot) continue;
        const held = Math.min(p.commonPrefix(prompt), prompt.length - 1);
        if (held > most) [from, most] = [p, held];
      }
      if (from) nPast = most;
    }
    r.record = prompt;
    r.copied = from ? nPast : 0;
    // until its first token, the cache holds what was kept (or copied); until its end, that and the prompt
    slot.cached = prompt.slice(0, nPast);
    this.running.set(slot.seq, r);
    try {
      r.id = this.native.submit(slot.seq, Uint32Array.from(from ? prompt.slice(nPast) : tokens), nPast, from ? { ...native, copyFrom: from.seq } : native);
    } catch (e) {
      this.running.delete(slot.seq);
      // grammars are checked before they get here (grammar-compiler.ts); one llama.cpp refuses anyway is still the schema's fault
      if (/^submit: the grammar/.test((e as Error).message)) throw new ApiError("schema_too_complex", `the request's schema gave a grammar llama.cpp refused (${(e as Error).message})`);
      throw e;
    }
  }

  /** @internal */
  cancel(r: Running): void {
    if (this.running.get(r.slot.seq) === r) this.native.cancel(r.slot.seq, r.id);
  }

  private onEvents(events: Int32Array): void {
    const woken = new Set<Running>();
    // [seq, token, kind, nPast, step] (step: the loop's step count when the event came)
    for (let i = 0; i < events.length; i += 5) {
      const seq = events[i]!;
      const token = events[i + 1]!;
      const kind = KIND[events[i + 2]!]!;
      const nPast = events[i + 3]!;
      const r = this.running.get(seq);
      if (!r) continue;
      woken.add(r);
      if (kind === "token") {
        // its first token: the prompt is in the cache, for another slot's prompt to copy (share)
        if (!r.primed) {
          r.primed = true;
          r.slot.cached = r.record.slice(0, nPast);
        }
        r.queue.push(token);
        r.record.push(token);
        continue;
      }
      this.running.delete(seq);
      if (kind === "error") {
        r.error = loopError(token, this.budget);
        // nPast -1: what the cache holds is not known for certain
        r.slot.cached = nPast >= 0 ? r.record.slice(0, nPast) : [];
      } else {
        if (kind === "max") r.queue.push(token);
        if (kind === "max" || kind === "eog") r.record.push(token);
        r.slot.cached = r.record.slice(0, nPast);
        r.end = { reason: kind, token, nPast };
      }
      r.ended();
    }
    for (const r of woken) {
      const w = r.wake;
      r.wake = null;
      w?.();
    }
  }

  /** Ends every request, then stops the thread: before the context is disposed. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.native.close();
    for (const r of this.running.values()) {
      r.error = new Error(ERRORS[-5]);
      r.slot.cached = [];
      r.ended();
      r.wake?.();
    }
    this.running.clear();
  }
}

export class LoopStream implements AsyncIterableIterator<number> {
  private readonly r: Running;
  private readonly done: Promise<void>;
  private started = false;
  private cancelled = false;

  constructor(
    private readonly loop: DecodeLoop,
    readonly slot: LoopSlot,
    private readonly tokens: readonly number[],
    private readonly nPast: number,
    private readonly request: LoopRequest,
  ) {
    let ended!: () => void;
    this.done = new Promise<void>((r) => (ended = r));
    this.r = { slot, id: 0, record: [], copied: 0, primed: false, queue: [], end: null, error: null, wake: null, ended };
  }

  [Symbol.asyncIterator]() {
    return this;
  }

  private async begin(): Promise<void> {
    if (this.started) return;
    this.started = true;
    // the slot's previous request ends before this one starts on its sequence
    const previous = this.slot.busy;
    this.slot.busy = this.done;
    await previous;
    if (this.cancelled) {
      this.r.end = { reason: "cancelled", token: -1, nPast: this.nPast };
      this.r.ended();
      return;
    }
    try {
      this.loop.start(this.slot, this.tokens, this.nPast, this.request, this.r);
    } catch (e) {
      this.r.error = e as Error;
      this.r.ended();
      throw e;
    }
  }

  next(): Promise<IteratorResult<number>> {
    // a token already here is taken without the hops of an async function (every token)
    if (this.started) {
      const token = this.r.queue.shift();
      if (token !== undefined) return Promise.resolve({ value: token, done: false });
    }
    return this.wait();
  }

  private async wait(): Promise<IteratorResult<number>> {
    await this.begin();
    const r = this.r;
    for (;;) {
      const token = r.queue.shift();
      if (token !== undefined) return { value: token, done: false };
      if (r.error) throw r.error;
      if (r.end) return { value: undefined, done: true };
      await new Promise<void>((w) => (r.wake = w));
    }
  }

  /**
   * Stops the request wherever it stands, its prompt's decoding included (the loop takes the cancel
   * between two steps), without waiting: the iteration then ends, `end.reason` "cancelled" with
   * `end.nPast` the prompt tokens decoded by then.
   */
  cancel(): void {
    this.cancelled = true;
    if (this.r.id !== 0 && !this.r.end && !this.r.error) this.loop.cancel(this.r);
  }

  /** Stops generating (if it still is) and resolves once the loop let go of the slot. */
  async return(): Promise<IteratorResult<number>> {
    if (!this.started) {
      this.started = true;
      this.r.ended();
      return { value: undefined, done: true };
    }
    if (!this.r.end && !this.r.error) this.loop.cancel(this.r);
    await this.done;
    return { value: undefined, done: true };
  }

  /** How the request ended (after the iteration is over). */
  get end(): LoopEnd | null {
    return this.r.end;
  }

  /** Prompt tokens the request started from in a copy of another slot's cache (0: none copied). */
  get copied(): number {
    return this.r.copied;
  }
}
