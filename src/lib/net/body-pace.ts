// Request bodies must keep a pace (server.body_grace_s, server.body_min_bytes_per_s). Bun's idle
// timer does not count bytes arriving in a request body (measured on Bun 1.4.5: a body arriving
// steadily at 10 KB/s was cut after the idle timeout all the same), so a body that takes longer than
// the idle timeout must be exempt from it, and then nothing bounds it: one byte every few seconds
// held a connection, and its file descriptor, forever. This is the bound instead: after a grace
// period, the bytes received must keep up with a minimum rate, counted from the request's head.
// A slow LAN's 500 MB upload is far ahead of it; a trickle is cut once the grace is over.
//
// One sweep a second looks at every body still arriving (no timer per request); a body that has
// fallen behind has its stream failed with the reason the caller gave, and its source cancelled.

export interface PaceRule {
  /** Time a body may take before the rate applies, in ms. */
  graceMs: number;
  /** The average rate a body must keep from its head on, once the grace is over. */
  minBytesPerS: number;
}

/** Whether a body that brought `bytes` in `elapsedMs` has fallen behind `rule`. */
export function behind(rule: PaceRule, elapsedMs: number, bytes: number): boolean {
  return elapsedMs > rule.graceMs && bytes < (rule.minBytesPerS * (elapsedMs - rule.graceMs)) / 1000;
}

export interface PacedBody {
  /** The body as the application reads it: the source's bytes, or the cut's error. */
  readonly stream: ReadableStream<Uint8Array>;
  /** Every byte has arrived. */
  readonly complete: boolean;
  /** Cut for falling behind. */
  readonly cut: boolean;
}

interface Watched {
  start: number;
  bytes: number;
  cut(): void;
}

export class BodyPace {
  private readonly open = new Set<Watched>();
  private sweeper: ReturnType<typeof setInterval> | null = null;

  constructor(
    readonly rule: PaceRule,
    private readonly now: () => number = () => performance.now(),
    private readonly sweepMs = 1000,
  ) {}

  /** Bodies still arriving. */
  get size(): number {
    return this.open.size;
  }

  /**
   * Follows `source`: `onComplete` runs when its last byte has arrived; when it falls behind, the
   * returned stream fails with `reason()` and `onCut` runs.
   */
  watch(source: ReadableStream<Uint8Array>, hooks: { reason: () => Error; onComplete?: () => void; onCut?: () => void }): PacedBody {
    const reader = source.getReader();
    let controller!: ReadableStreamDefaultController<Uint8Array>;
    let complete = false;
    let cut = false;
    const entry: Watched = {
      start: this.now(),
      bytes: 0,
      cut: () => {
        cut = true;
        this.forget(entry);
        const reason = hooks.reason();
        try {
          controller.error(reason);
        } catch {}
        reader.cancel(reason).catch(() => {});
        hooks.onCut?.();
      },
    };
    const stream = new ReadableStream<Uint8Array>({
      start: (c) => {
        controller = c;
      },
      pull: async (c) => {
        let r: Awaited<ReturnType<typeof reader.read>>;
        try {
          r = await reader.read();
        } catch (e) {
          this.forget(entry);
          if (!cut) c.error(e);
          return;
        }
        if (cut) return;
        if (r.done) {
          complete = true;
          this.forget(entry);
          c.close();
          hooks.onComplete?.();
        } else {
          entry.bytes += r.value.byteLength;
          c.enqueue(r.value);
        }
      },
      cancel: (reason) => {
        this.forget(entry);
        return reader.cancel(reason);
      },
    });
    this.open.add(entry);
    this.sweeper ??= setInterval(() => this.sweep(), this.sweepMs);
    (this.sweeper as { unref?: () => void }).unref?.();
    return {
      stream,
      get complete() {
        return complete;
      },
      get cut() {
        return cut;
      },
    };
  }

  /** Cuts every body that has fallen behind; returns how many. */
  sweep(): number {
    const now = this.now();
    let n = 0;
    for (const w of this.open) {
      if (behind(this.rule, now - w.start, w.bytes)) {
        w.cut();
        n++;
      }
    }
    return n;
  }

  private forget(w: Watched): void {
    this.open.delete(w);
    if (this.open.size === 0 && this.sweeper) {
      clearInterval(this.sweeper);
      this.sweeper = null;
    }
  }
}
