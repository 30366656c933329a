import { acquireLock } from "lifecycle-utils";
import { TokenMeter, type LlamaContext, type LlamaContextSequence, type Token, type TokenBias } from "node-llama-cpp";
import { shareOut, type DecodeGate } from "./decode-gate";
import { biasFollower, sampleMany, type NativeSampler } from "./native-sampler";

// The decode steps of a context's plain requests (plain.ts), driven here instead of through
// node-llama-cpp's batch queue. Each step: every stream that has tokens to decode goes in one
// batch (in sequence-id order: one llama.cpp micro-batch, decode-gate.ts rule 4), the batch is
// decoded, each stream's next token is sampled by the llama addon in one call, and the next step is
// put together and dispatched before those tokens reach their requests, so detokenizing, stop
// scanning and streaming run while the next step decodes instead of between steps. Through
// node-llama-cpp, each step cost ~1.2-1.5 ms of JavaScript for eight streams between two decodes
// (its queue, per-sequence promise chains and `setImmediate` dispatch; issue "chat throughput").
//
// A stream runs one token ahead of its request: the token it is handed has already gone into the
// next step. A request that stops there (a stop string) leaves that token in its slot's cache,
// where the sequence's bookkeeping records it, as it records every step's tokens.
//
// The steps take node-llama-cpp's context lock one at a time, so erases, prompts of requests
// through LlamaChat and its own steps get their turn between them; while a step waits for the
// lock, the decode gate holds LlamaChat's sequences (as for an erase, rule 1). Rules 2 and 3 (live
// prompts first, narrow batch steps beside live traffic) are asked of the gate for each stream.

/** node-llama-cpp's context internals the loop drives (LlamaContext, 3.22). */
interface ContextInternals {
  _ctx: {
    initBatch(size: number): void;
    addToBatch(sequenceId: number, firstTokenSequenceIndex: number, tokens: Uint32Array, logitIndexes: Uint32Array): Uint32Array;
    decodeBatch(): Promise<void>;
    setThreads(threads: number): void;
  };
  _batchSize: number;
  _backendContextDisposeGuard: { createPreventDisposalHandle(): { dispose(): void } };
  _reserveThreads(): void;
  _scheduleToFreeReservedThreads(): void;
  _threadSplitterConsumer?: {
    getAllocationToConsume(): [number, { dispose(): void }] | Promise<[number, { dispose(): void }] | undefined> | undefined;
  };
}

/** node-llama-cpp's sequence internals the loop keeps up to date (LlamaContextSequence, 3.22). */
interface SequenceInternals {
  _sequenceId: number;
  _nextTokenIndex: number;
  _contextTokens: Token[];
  _tokenMeter: TokenMeter;
  needsCheckpoints: boolean;
}

/** Why `context`'s plain requests cannot be stepped here, or null if they can. */
export function stepLoopUnavailable(context: LlamaContext, sequence: LlamaContextSequence): string | null {
  const c = context as unknown as Partial<ContextInternals>;
  const s = sequence as unknown as Partial<SequenceInternals>;
  const ctx = c._ctx as Partial<ContextInternals["_ctx"]> | undefined;
  if (!ctx || typeof ctx.initBatch !== "function" || typeof ctx.addToBatch !== "function" || typeof ctx.decodeBatch !== "function")
    return "this node-llama-cpp's context has no batch calls the step loop drives";
  if (typeof c._batchSize !== "number" || typeof c._backendContextDisposeGuard?.createPreventDisposalHandle !== "function" || typeof c._reserveThreads !== "function")
    return "this node-llama-cpp lacks the context internals the step loop drives";
  if (typeof s._sequenceId !== "number" || typeof s._nextTokenIndex !== "number" || !Array.isArray(s._contextTokens) || !(s._tokenMeter instanceof TokenMeter))
    return "this node-llama-cpp lacks the sequence internals the step loop keeps";
  if (s.needsCheckpoints) return "the model's cache needs checkpoints (recurrent, hybrid or sliding-window): node-llama-cpp takes them";
  return null;
}

export interface StepStreamOptions {
  sequence: LlamaContextSequence;
  /** Tokens to decode first: the part of the prompt not in the sequence's cache. */
  input: Token[];
  sampler: NativeSampler;
  /** Asked for before each token is sampled (a forced prefix changes it per token). */
  tokenBias?: () => TokenBias;
  /** No step samples more than this many tokens for the stream. */
  maxTokens: number;
}

class Stream {
  readonly id: number;
  readonly seq: SequenceInternals;
  input: Token[];
  sampled = 0;
  /** Delivered, not yet handed to the request. */
  readonly queue: Token[] = [];
  /** Sampled an end-of-generation token. */
  ended = false;
  error: unknown = null;
  closed = false;
  wake: (() => void) | null = null;
  readonly followBias: (bias: TokenBias | undefined) => void;
  /** The loop's step count when it last stepped. */
  lastStep = 0;

  constructor(readonly o: StepStreamOptions) {
    this.seq = o.sequence as unknown as SequenceInternals;
    this.id = this.seq._sequenceId;
    this.input = o.input;
    this.followBias = biasFollower(o.sampler);
  }

  notify(): void {
    const w = this.wake;
    this.wake = null;
    w?.();
  }
}

type Delivery = { stream: Stream; token: Token | null };

interface InStep {
  stream: Stream;
  tokens: Token[];
  /** The batch logit index of its last token, or -1 when the step does not finish its input. */
  logit: number;
}

const EMPTY = new Uint32Array(0);

export class StepLoop {
  private readonly streams = new Set<Stream>();
  private running = false;
  private steps = 0;
  private kick: (() => void) | null = null;
  /** The step in flight: its streams, and when it is recorded. */
  private current: { streams: ReadonlySet<Stream>; done: Promise<void> } | null = null;
  private readonly ctx: ContextInternals;

  constructor(
    private readonly context: LlamaContext,
    private readonly gate: DecodeGate | null,
  ) {
    this.ctx = context as unknown as ContextInternals;
    gate?.onWake(() => this.poke());
  }

  /** The tokens generated for a stream, one per step, ending at an end-of-generation token. */
  open(o: StepStreamOptions): AsyncGenerator<Token> {
    const stream = new Stream(o);
    // at least one token is decoded, for the logits of the first sample (plain.ts)
    if (o.input.length === 0) stream.error = new Error("a stream needs a token to decode first");
    this.streams.add(stream);
    // steps of requests through node-llama-cpp's queue no longer wait for this sequence (rule 4)
    this.gate?.idle(o.sequence);
    this.poke();
    return this.tokens(stream);
  }

  private async *tokens(stream: Stream): AsyncGenerator<Token> {
    try {
      for (;;) {
        const token = stream.queue.shift();
        if (token !== undefined) {
          if (stream.queue.length === 0) this.poke();
          yield token;
          continue;
        }
        if (stream.error) throw stream.error;
        if (stream.ended) return;
        await new Promise<void>((r) => (stream.wake = r));
      }
    } finally {
      await this.close(stream);
    }
  }

  /**
   * Ends a stream; resolves once no step decodes for it any more, so the sequence's cache and its
   * bookkeeping agree before its slot goes to another request (which erases from them).
   */
  private async close(stream: Stream): Promise<void> {
    if (stream.closed) return;
    stream.closed = true;
    this.streams.delete(stream);
    this.gate?.promptDecoded(stream.id);
    this.poke();
    const step = this.current;
    if (step?.streams.has(stream)) await step.done;
    stream.o.sampler.dispose();
  }

  private poke(): void {
    if (!this.running) {
      if (this.streams.size === 0) return;
      this.running = true;
      void this.drive();
      return;
    }
    const k = this.kick;
    this.kick = null;
    k?.();
  }

  /** The streams that decode in the next step, in sequence-id order. */
  private pick(): Stream[] {
    const gate = this.gate;
    const ready = [...this.streams].filter((s) => s.input.length > 0 && s.queue.length === 0 && !s.error);
    const byId = (a: Stream, b: Stream) => a.id - b.id;
    if (!gate) return ready.sort(byId);
    // admitted least recently stepped first: batch streams take turns when only some may go (rule 3)
    let batch = 0;
    return ready
      .sort((a, b) => a.lastStep - b.lastStep || a.id - b.id)
      .filter((s) => {
        if (!gate.mayDecode(s.id, batch)) return false;
        if (gate.isBatch(s.id)) batch++;
        return true;
      })
      .sort(byId);
  }

  private async drive(): Promise<void> {
    let undelivered: Delivery[] = [];
    try {
      for (;;) {
        if (this.pick().length === 0) {
          this.deliver(undelivered);
          undelivered = [];
          if (this.streams.size === 0) return;
          await new Promise<void>((r) => (this.kick = r));
          continue;
        }
        await this.awaitJoining();
        const lockWait = this.gate?.lockWanted();
        const lock = await acquireLock([this.context, "context"]);
        lockWait?.();
        try {
          const step = this.pick();
          if (step.length === 0) continue;
          const batchIds = this.gate ? step.filter((s) => this.gate!.isBatch(s.id)).map((s) => s.id) : [];
          this.gate?.loopDecoding(batchIds, true);
          let recorded!: () => void;
          this.current = { streams: new Set(step), done: new Promise<void>((r) => (recorded = r)) };
          try {
            const decoding = await this.dispatch(step);
            // the previous step's tokens reach their requests while this one decodes
            this.deliver(undelivered);
            undelivered = [];
            undelivered = await this.finish(decoding);
          } finally {
            this.current = null;
            recorded();
            this.gate?.loopDecoding(batchIds, false);
          }
        } finally {
          // As node-llama-cpp's loop does, and only under the lock: the next step (ours or its)
          // takes the reservation back first. Freed while a step holds threads, the splitter
          // loses count of them (a division by zero wanted threads) and the next step waits forever.
          this.ctx._scheduleToFreeReservedThreads();
          lock.dispose();
        }
      }
    } catch (e) {
      // not expected (a step's own errors go to its streams): every stream learns of it
      this.deliver(undelivered);
      for (const s of this.streams) {
        s.error = e;
        s.notify();
      }
    } finally {
      this.running = false;
      if (this.streams.size > 0 && [...this.streams].some((s) => !s.error)) this.poke();
    }
  }

  /** Waits, at most the gate's step wait, for requests that took a slot to open their stream (rule 4). */
  private async awaitJoining(): Promise<void> {
    const gate = this.gate;
    if (!gate?.joining()) return;
    const until = performance.now() + gate.stepWait;
    while (gate.joining()) {
      const left = until - performance.now();
      if (left <= 0) return;
      await new Promise<void>((r) => {
        const timer = setTimeout(r, left);
        this.kick = () => {
          clearTimeout(timer);
          r();
        };
      });
    }
  }

  /** Puts the step's batch together and starts decoding it. */
  private async dispatch(step: Stream[]): Promise<{ items: InStep[]; decoded: Promise<void> }> {
    const ctx = this.ctx;
    const shares = shareOut(
      step.map((s) => s.input.length),
      ctx._batchSize,
    );
    const items: InStep[] = [];
    let guard: { dispose(): void } | undefined;
    let threads: { dispose(): void } | undefined;
    try {
      guard = ctx._backendContextDisposeGuard.createPreventDisposalHandle();
      ctx._reserveThreads();
      const allocation = ctx._threadSplitterConsumer?.getAllocationToConsume();
      const [count, handle] = (allocation instanceof Promise ? await allocation : allocation) ?? [];
      threads = handle;
      if (count != null) ctx._ctx.setThreads(count);
      ctx._ctx.initBatch(shares.reduce((a, b) => a + b, 0));
      this.steps++;
      step.forEach((s, i) => {
        const n = shares[i]!;
        if (n === 0) return;
        const tokens = s.input.slice(0, n);
        const finishing = n === s.input.length;
        if (s.seq._nextTokenIndex + n > this.context.contextSize - 1) {
          // not reached: a request's prompt and max_tokens fit its slot (chat-engine.ts)
          s.error = new Error(`the context window (${this.context.contextSize} tokens) is full`);
          s.notify();
          return;
        }
        if (finishing) s.followBias(s.o.tokenBias?.());
        const logits = ctx._ctx.addToBatch(s.id, s.seq._nextTokenIndex, Uint32Array.from(tokens), finishing ? Uint32Array.of(n - 1) : EMPTY);
        items.push({ stream: s, tokens, logit: finishing ? logits[0]! : -1 });
        s.lastStep = this.steps;
      });
      const decoded = items.length ? ctx._ctx.decodeBatch() : Promise.resolve();
      const release = () => {
        threads?.dispose();
        guard?.dispose();
      };
      return { items, decoded: decoded.finally(release) };
    } catch (e) {
      threads?.dispose();
      guard?.dispose();
      for (const s of step) s.error ??= e;
      for (const s of step) s.notify();
      return { items: [], decoded: Promise.resolve() };
    }
  }

  /** Waits for the decode, records it in the sequences, and samples each finishing stream's next token. */
  private async finish({ items, decoded }: { items: InStep[]; decoded: Promise<void> }): Promise<Delivery[]> {
    try {
      await decoded;
    } catch (e) {
      for (const { stream } of items) {
        stream.error = e;
        stream.notify();
      }
      return [];
    }
    for (const { stream, tokens, logit } of items) {
      const seq = stream.seq;
      seq._nextTokenIndex += tokens.length;
      for (const t of tokens) seq._contextTokens.push(t);
      stream.input = stream.input.length === tokens.length ? [] : stream.input.slice(tokens.length);
      // as node-llama-cpp counts: tokens with logits are output
      TokenMeter.useTokens(seq._tokenMeter, tokens.length - (logit >= 0 ? 1 : 0), "input");
      if (logit >= 0) TokenMeter.useTokens(seq._tokenMeter, 1, "output");
    }
    const sampling = items.filter((i) => i.logit >= 0);
    if (sampling.length === 0) return [];
    let next: Int32Array;
    try {
      next = sampleMany(
        sampling.map((i) => i.stream.o.sampler),
        Int32Array.from(sampling, (i) => i.logit),
      );
    } catch (e) {
      for (const { stream } of sampling) {
        stream.error = e;
        stream.notify();
      }
      return [];
    }
    const model = this.context.model;
    const out: Delivery[] = [];
    sampling.forEach(({ stream }, k) => {
      if (stream.sampled === 0) this.gate?.promptDecoded(stream.id);
      if (stream.closed) return;
      const token = next[k]!;
      if (token < 0) {
        stream.error = new Error("the model gave no logits to sample the next token from");
        stream.notify();
        return;
      }
      stream.sampled++;
      if (model.isEogToken(token as Token)) {
        out.push({ stream, token: null });
        return;
      }
      if (stream.sampled < stream.o.maxTokens) stream.input = [token as Token];
      out.push({ stream, token: token as Token });
    });
    return out;
  }

  private deliver(deliveries: Delivery[]): void {
    for (const { stream, token } of deliveries) {
      if (stream.closed) continue;
      if (token === null) stream.ended = true;
      else stream.queue.push(token);
      stream.notify();
    }
  }
}
