import type { LlamaContext, LlamaContextSequence } from "node-llama-cpp";

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
  now?: () => number;
}

/**
 * Decides which of a context's sequences may queue their next decode step. Three rules:
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
 *    they go on as soon as its first decode is done. Live sequences never wait for each other.
 * 3. Narrow batch steps beside live traffic (`widthBesideLive`).
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
  private readonly quietMs: number;
  private readonly now: () => number;

  private constructor(private readonly opts: DecodeGateOptions) {
    this.quietMs = opts.quietMs ?? 2000;
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
      gate.eraseDone(id, true);
      while (gate.mustWait(id)) await new Promise<void>((r) => gate.waiters.push(r));
      const counted = gate.background.has(id);
      if (counted) gate.decoding.add(id);
      try {
        return await decode.call(this, item, ...rest);
      } finally {
        const prompt = gate.prompts.delete(id);
        if ((counted && gate.decoding.delete(id)) || prompt) gate.wake();
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
  }

  /** Holds batch work back until `sequence`'s next decode (its prompt) is done, or `end` is called. */
  livePrompt(sequence: LlamaContextSequence): () => void {
    const id = idOf(sequence);
    this.prompts.add(id);
    return () => {
      if (this.prompts.delete(id)) this.wake();
    };
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
  }
}

const idOf = (sequence: LlamaContextSequence) => (sequence as unknown as Internal)._sequenceId!;
