// Pure: splits a model's output text, as it arrives, into answer text and reasoning, and finds
// where it stops. Used by the plain generation loop (plain.ts), which feeds it each token's text.
//
// - Stop strings end the output where they start; the caller's own (`stop`) are reported by name,
//   the chat template's (an end-of-turn marker written out as text) are not.
// - A thought opens at `thought.open` and closes at `thought.close`; text inside is reasoning, the
//   markers themselves are dropped.
// - Text that could still become a marker or a stop string is held back until it cannot; nothing
//   is cut or lost: `finish()` releases what is held when the output ends for another reason.
// - A piece may be invisible (a control token, matched by its written form but never shown).

export interface ScannerOptions {
  /** The caller's stop strings, reported when matched. */
  stops: readonly string[];
  /** The template's stop strings (end of turn written as text). */
  templateStops: readonly string[];
  thought?: { open: string; close: string };
}

export type ScannedEvent = { type: "text" | "reasoning"; text: string };
export type ScanStop = { stop: string; custom: boolean };

export class OutputScanner {
  private held = "";
  /** One flag per UTF-16 unit of `held`: false for the written form of a control token. */
  private shown: boolean[] = [];
  private thinking = false;
  private stopped: ScanStop | null = null;
  private readonly stops: { text: string; custom: boolean }[];

  constructor(private readonly o: ScannerOptions) {
    this.stops = [
      ...o.stops.filter((s) => s.length > 0).map((text) => ({ text, custom: true })),
      ...o.templateStops.filter((s) => s.length > 0).map((text) => ({ text, custom: false })),
    ];
  }

  /** Inside a thought now. */
  get inThought(): boolean {
    return this.thinking;
  }

  get stop(): ScanStop | null {
    return this.stopped;
  }

  /** Adds a piece of output; returns what can be shown now. After a stop, nothing more is taken. */
  push(text: string, visible = true): ScannedEvent[] {
    if (this.stopped || text.length === 0) return [];
    this.held += text;
    for (let i = 0; i < text.length; i++) this.shown.push(visible);
    const out: ScannedEvent[] = [];
    for (;;) {
      const hit = this.firstMatch();
      if (!hit) {
        this.release(this.held.length - this.pendingLength(), out);
        return out;
      }
      this.release(hit.at, out);
      this.drop(hit.text.length);
      if (hit.kind === "stop") {
        this.stopped = { stop: hit.text, custom: hit.custom };
        this.held = "";
        this.shown = [];
        return out;
      }
      this.thinking = hit.kind === "open";
    }
  }

  /** The output ended (end of generation, max tokens, abort): everything held is shown. */
  finish(): ScannedEvent[] {
    const out: ScannedEvent[] = [];
    this.release(this.held.length, out);
    return out;
  }

  private patterns(): { text: string; kind: "open" | "close" | "stop"; custom: boolean }[] {
    const marks = this.o.thought ? [this.thinking ? { text: this.o.thought.close, kind: "close" as const, custom: false } : { text: this.o.thought.open, kind: "open" as const, custom: false }] : [];
    return [...marks, ...this.stops.map((s) => ({ text: s.text, kind: "stop" as const, custom: s.custom }))];
  }

  /** The earliest complete pattern in what is held (the longer one where two start together). */
  private firstMatch() {
    let best: { at: number; text: string; kind: "open" | "close" | "stop"; custom: boolean } | null = null;
    for (const p of this.patterns()) {
      if (p.text.length === 0) continue;
      const at = this.held.indexOf(p.text);
      if (at < 0) continue;
      if (!best || at < best.at || (at === best.at && p.text.length > best.text.length)) best = { at, ...p };
    }
    return best;
  }

  /** Length of the longest tail of what is held that a pattern could still start with. */
  private pendingLength(): number {
    let longest = 0;
    for (const p of this.patterns())
      for (let k = Math.min(p.text.length - 1, this.held.length); k > longest; k--)
        if (this.held.endsWith(p.text.slice(0, k))) {
          longest = k;
          break;
        }
    return longest;
  }

  private release(n: number, out: ScannedEvent[]) {
    if (n <= 0) return;
    let text = "";
    for (let i = 0; i < n; i++) if (this.shown[i]) text += this.held[i];
    this.drop(n);
    if (!text) return;
    const type = this.thinking ? "reasoning" : "text";
    const last = out.at(-1);
    if (last?.type === type) last.text += text;
    else out.push({ type, text });
  }

  private drop(n: number) {
    this.held = this.held.slice(n);
    this.shown.splice(0, n);
  }
}
