import type { CustomBatchingPrioritizationStrategy, LlamaContext, LlamaContextSequence, PrioritizedBatchItem } from "node-llama-cpp";

type Erase = (ranges: unknown, opts?: { skipLock?: boolean }) => Promise<void>;
type Decode = (item: { sequenceId: number }, ...rest: unknown[]) => Promise<unknown>;
type Internal = { _eraseContextTokenRanges?: Erase; _sequenceId?: number };

export interface DecodeGateOptions {
  /**
   * How many batch sequences may decode in one step while live traffic is around (a live lease
   * is held, or was released less than `quietMs` ago). A live request arriving during a step waits
   * for it to end, and on a CPU a step costs about the same per sequence in it, so narrow steps
   * keep that wait short; on a GPU a wide step costs little more than a narrow one (Infinity).
   */
  widthBesideLive: number;
  quietMs?: number;
  /**
   * Longest a step waits for a generating sequence that is neither in the step in flight nor
   * ready (rule 4); past it, the step goes with those that are. Only reached when a sequence
   * stalls between tokens.
   */
  stepWaitMs?: number;
  now?: () => number;
}

/**
 * Decides which of a context's sequences may queue their next decode step, and when. Four rules:
 *
 * 1. Erases get in. node-llama-cpp decodes all sequences of a context in one loop that holds the
 *    context's lock and goes round again as long as some sequence queued its next step by the
 *    time the last step's results were handed out — which a generating sequence always has.
 *    Erasing tokens needs that lock, and reusing a slot starts by erasing the part of its cache
 *    the new prompt does not share; so a request taking a slot waited until every other sequence
 *    had stopped generating (measured: ~1 s to the first token behind batch lines instead of
 *    ~60 ms). While an erase waits, the other sequences' next steps are held back, the loop finds
 *    its queue empty after the step in flight and lets go of the lock; when the erase is done (or
 *    the erasing sequence decodes again, which it only does after its erase left the lock) the held
 *    steps go on, in one batch.
 * 2. Live prompts first. While a live request's prompt is evaluated, sequences running batch
 *    work hold their next step, so the prompt is decoded alone, as fast as on an idle server;
 *    they go on as soon as its first decode is done.
 * 3. Narrow batch steps beside live traffic (`widthBesideLive`).
 * 4. One step for all. Every sequence generating (from its lease to `idle`) queues its next
 *    step only once all the others that are not held back by rules 1-3 have theirs ready, and they
 *    are queued in sequence-id order; one still in the step in flight is waited for as long as that
 *    step takes, one that stalls outside a step at most `stepWaitMs`. node-llama-cpp dispatches whatever is queued when its loop
 *    comes round, and its sampling results arrive one by one, so without this a step went with
 *    some of the sequences and the rest made a second, nearly as costly step (measured: 124
 *    decodes for 8 streams × 64 tokens instead of ~66). And llama.cpp splits a batch for a
 *    multi-stream cache (node-llama-cpp's, kv_unified off) into one micro-batch per run of
 *    consecutive ascending sequence ids, so a step with sequences 3, 0, 2, 1 in that order cost
 *    four single-token decodes (8 streams: 46 ms a step instead of 21). `batchOrder` keeps the
 *    dispatched batch in id order too; the slot pool keeps busy slots adjacent.
 *
 * All work by wrapping two internal methods of node-llama-cpp (`LlamaContext._decodeTokens`,
 * `LlamaContextSequence._eraseContextTokenRanges`); `attach` returns null, changing nothing, if
 * this version lacks them, so the caller can say so.
 */
export class DecodeGate {
  private readonly erasing = new Map<number, number>(); // sequence id -> erases waiting or running
  private readonly prompts = new Set<number>(); // live sequences evaluating their prompt
  private readonly background = new Set<number>(); // sequences running batch work
  private readonly decoding = new Set<number>(); // batch sequences past the gate, step not done
  private readonly live = new Set<number>(); // sequences leased to live requests
  private lastLive = -Infinity; // when the last live lease ended
  private quietTimer: ReturnType<typeof setTimeout> | null = null;
  private waiters: (() => void)[] = [];
  private readonly listeners: (() => void)[] = []; // the step loop, told of every wake
  private readonly stepping = new Set<number>(); // generating: from lease (or first decode) to idle/release
  private readonly fresh = new Set<number>(); // leased, not decoded yet (nor idle)
  private readonly held = new Set<number>(); // held back by rules 1-3 right now
  private readonly inFlight = new Set<number>(); // decode queued or running
  private arrived: { id: number; go: () => void }[] = []; // ready for the next step
  private stepTimer: ReturnType<typeof setTimeout> | null = null;
  private going = false; // a go() is queued
  private readonly quietMs: number;
  private readonly stepWaitMs: number;
  private readonly now: () => number;

  private constructor(private readonly opts: DecodeGateOptions) {
    this.quietMs = opts.quietMs ?? 2000;
    this.stepWaitMs = opts.stepWaitMs ?? 20;
    this.now = opts.now ?? (() => performance.now());
  }

  static attach(context: LlamaContext, sequences: readonly LlamaContextSequence[], opts: DecodeGateOptions): DecodeGate | null {
    const ctx = context as unknown as { _decodeTokens?: Decode };
    const seqs = sequences as unknown as Internal[];
    const decode = ctx._decodeTokens;
    if (typeof decode !== "function" || seqs.some((s) => typeof s._eraseContextTokenRanges !== "function" || typeof s._sequenceId !== "number")) return null;
    const gate = new DecodeGate(opts);
    ctx._decodeTokens = async function (this: unknown, item, ...rest) {
      const id = item.sequenceId;
      gate.fresh.delete(id);
      gate.eraseDone(id, true);
      for (;;) {
        while (gate.mustWait(id)) {
          gate.hold(id, true);
          await new Promise<void>((r) => gate.waiters.push(r));
        }
        gate.hold(id, false);
        await gate.step(id);
        if (!gate.mustWait(id)) break;
      }
      const counted = gate.background.has(id);
      if (counted) gate.decoding.add(id);
      gate.inFlight.add(id);
      try {
        return await decode.call(this, item, ...rest);
      } finally {
        gate.inFlight.delete(id);
        const prompt = gate.prompts.delete(id);
        if ((counted && gate.decoding.delete(id)) || prompt) gate.wake();
        gate.stepReady();
      }
    };
    for (const seq of seqs) {
      const erase = seq._eraseContextTokenRanges!;
      seq._eraseContextTokenRanges = async function (this: unknown, ranges, opts) {
        if (opts?.skipLock) return erase.call(this, ranges, opts); // runs inside the lock already
        const id = seq._sequenceId!;
        gate.erasing.set(id, (gate.erasing.get(id) ?? 0) + 1);
        try {
          return await erase.call(this, ranges, opts);
        } finally {
          gate.eraseDone(id, false);
        }
      };
    }
    return gate;
  }

  /** `sequence` was leased, to batch work or to a live request. */
  leased(sequence: LlamaContextSequence, batch: boolean): void {
    const id = idOf(sequence);
    if (batch) this.background.add(id);
    else this.live.add(id);
    // Expected at the next step from now on: a request taking a slot while a step is about to go
    // joins it (its prompt), instead of missing it by a few microtasks and waiting a whole step,
    // which during a long prompt step cost ~2 s (measured). The others wait for it at most
    // stepWaitMs if it is slow to start.
    this.stepping.add(id);
    this.fresh.add(id);
  }

  /** `sequence`'s lease ended. */
  released(sequence: LlamaContextSequence): void {
    const id = idOf(sequence);
    if (this.live.delete(id)) {
      this.lastLive = this.now();
      // batch steps widen again once live traffic has been quiet for a while
      if (this.quietTimer) clearTimeout(this.quietTimer);
      this.quietTimer = setTimeout(() => this.wake(), this.quietMs + 1);
      this.quietTimer.unref?.();
    }
    this.decoding.delete(id);
    if (this.background.delete(id)) this.wake();
    this.idle(sequence);
  }

  /** `sequence` stopped generating (its lease may go on a little longer): steps no longer wait for it. */
  idle(sequence: LlamaContextSequence): void {
    const id = idOf(sequence);
    this.held.delete(id);
    this.fresh.delete(id);
    if (this.stepping.delete(id)) this.stepReady();
  }

  /** Holds batch work back until `sequence`'s next decode (its prompt) is done, or `end` is called. */
  livePrompt(sequence: LlamaContextSequence): () => void {
    const id = idOf(sequence);
    this.prompts.add(id);
    return () => this.promptDecoded(id);
  }

  // The step loop (step-loop.ts) decodes plain requests without node-llama-cpp's queue, so this
  // wrapper never sees them; it asks these instead.

  /** Calls `listener` whenever held sequences may go on (an erase or a live prompt done, a lease ended, live traffic quiet). */
  onWake(listener: () => void): void {
    this.listeners.push(listener);
  }

  /**
   * Whether a request took a slot and has not decoded yet: the step loop waits for it at most
   * `stepWaitMs` before a step, so its prompt joins that step (rule 4) instead of waiting for it.
   */
  joining(): boolean {
    return this.fresh.size > 0;
  }

  get stepWait(): number {
    return this.stepWaitMs;
  }

  /** Whether `id` runs batch work. */
  isBatch(id: number): boolean {
    return this.background.has(id);
  }

  /** Whether the step loop may decode `id` now, `batchInStep` batch sequences being in its step already (rules 2 and 3). */
  mayDecode(id: number, batchInStep: number): boolean {
    if (!this.background.has(id)) return true;
    if (this.prompts.size > 0) return false;
    return this.decoding.size + batchInStep < this.opts.widthBesideLive || !this.liveAround();
  }

  /** The step loop's batch sequences `ids` started (true) or ended (false) a step: they count for rule 3. */
  loopDecoding(ids: readonly number[], on: boolean): void {
    if (ids.length === 0) return;
    for (const id of ids) {
      if (on) this.decoding.add(id);
      else this.decoding.delete(id);
    }
    if (!on) this.wake();
  }

  /** `id`'s prompt was decoded by the step loop: batch work goes on (rule 2). */
  promptDecoded(id: number): void {
    if (this.prompts.delete(id)) this.wake();
  }

  /**
   * The step loop waits for the context's lock: node-llama-cpp's loop, which keeps it while its
   * sequences keep queueing steps, holds them back after the step in flight (rule 1, as for an
   * erase). Returns the end of the wait.
   */
  lockWanted(): () => void {
    this.erasing.set(LOOP, (this.erasing.get(LOOP) ?? 0) + 1);
    return () => this.eraseDone(LOOP, false);
  }

  /** Resolves when `id` may queue its next step together with the other generating sequences (rule 4). */
  private step(id: number): Promise<void> {
    // joined at the first step too: a sequence that was idle (priming images) or decodes without a lease
    this.stepping.add(id);
    return new Promise<void>((go) => {
      this.arrived.push({ id, go });
      this.stepReady();
    });
  }

  private hold(id: number, held: boolean): void {
    if (!held) return void this.held.delete(id);
    this.held.add(id);
    this.stepReady();
  }

  /** Goes when every generating sequence not held back has arrived; else waits, at most stepWaitMs. */
  private stepReady(): void {
    if (this.arrived.length === 0) return;
    const arrived = new Set(this.arrived.map((a) => a.id));
    const missing = [...this.stepping].filter((id) => !this.held.has(id) && !arrived.has(id));
    if (missing.length > 0) {
      // One still in the step in flight comes when it ends (waiting for it costs nothing: that
      // step holds the context); only one that is out of it and late is waited for at most stepWaitMs.
      if (missing.every((id) => this.inFlight.has(id))) this.clearStepTimer();
      else this.armStepTimer();
      return;
    }
    // on the next microtask: the sequence arriving last is awaiting by then, so all continue in id order
    if (!this.going) {
      this.going = true;
      queueMicrotask(() => this.go());
    }
  }

  private armStepTimer(): void {
    if (this.stepTimer) return;
    this.stepTimer = setTimeout(() => this.go(), this.stepWaitMs);
    this.stepTimer.unref?.();
  }

  private clearStepTimer(): void {
    if (this.stepTimer) clearTimeout(this.stepTimer);
    this.stepTimer = null;
  }

  private go(): void {
    this.going = false;
    this.clearStepTimer();
    const ready = this.arrived.sort((a, b) => a.id - b.id);
    this.arrived = [];
    // resolved in id order, so their decodes are queued in that order
    for (const a of ready) a.go();
  }

  private mustWait(id: number): boolean {
    if (this.erasing.size > 0 && !this.erasing.has(id)) return true;
    if (!this.background.has(id)) return false;
    if (this.prompts.size > 0) return true;
    return this.decoding.size >= this.opts.widthBesideLive && this.liveAround();
  }

  private liveAround(): boolean {
    return this.live.size > 0 || this.now() - this.lastLive < this.quietMs;
  }

  private eraseDone(id: number, all: boolean): void {
    const n = this.erasing.get(id);
    if (n === undefined) return;
    if (!all && n > 1) return void this.erasing.set(id, n - 1);
    this.erasing.delete(id);
    this.wake();
  }

  private wake(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
    for (const l of this.listeners) l();
  }
}

/** The step loop's place in `erasing`: no sequence has this id. */
const LOOP = -1;

const idOf = (sequence: LlamaContextSequence) => (sequence as unknown as Internal)._sequenceId!;

/**
 * A batch of `size` tokens shared out among inputs of these lengths: the shortest take all they
 * need, the rest split what is left (as node-llama-cpp's "maximumParallelism" does).
 */
export function shareOut(lengths: readonly number[], size: number): number[] {
  const order = lengths.map((_, i) => i).sort((a, b) => lengths[a]! - lengths[b]!);
  const amount = new Array<number>(lengths.length).fill(0);
  let left = size;
  order.forEach((i, k) => {
    amount[i] = Math.min(lengths[i]!, Math.floor(left / (order.length - k)));
    left -= amount[i]!;
  });
  return amount;
}

/**
 * node-llama-cpp's batch item prioritization (`batching.itemPrioritizationStrategy`) for a
 * context: the batch's tokens shared out evenly among the queued items (shareOut), and the
 * items put in sequence-id order so llama.cpp decodes them as one micro-batch (rule 4 above).
 * node-llama-cpp hands the strategy its queued decodes' items in queue order without their
 * sequence ids; `queue` returns that queue, whose entries carry them, in the same order.
 */
export function batchOrder(queue: () => readonly { sequenceId: number }[] | undefined): CustomBatchingPrioritizationStrategy {
  return ({ items, size }): PrioritizedBatchItem[] => {
    const queued = queue();
    const ids = queued && queued.length === items.length ? queued.map((q) => q.sequenceId) : items.map((_, i) => i);
    const amount = shareOut(
      items.map((i) => i.tokens.length),
      size,
    );
    return items
      .map((item, i) => ({ item, processAmount: amount[i]!, id: ids[i]! }))
      .filter((p) => p.processAmount > 0)
      .sort((a, b) => a.id - b.id)
      .map(({ item, processAmount }) => ({ item, processAmount }));
  };
}
