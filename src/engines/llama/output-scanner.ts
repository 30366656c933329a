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
// - Reasoning tokens are those of the pieces with text shown as reasoning (a piece that is all
//   marker, such as the newline before `</think>`, is not one), each piece weighing its tokens.

export interface ScannerOptions {
  /** The caller's stop strings, reported when matched. */
  stops: readonly string[];
  /** The template's stop strings (end of turn written as text). */
  templateStops: readonly string[];
  thought?: { open: string; close: string };
}

export type ScannedEvent = { type: "text" | "reasoning"; text: string };
export type ScanStop = { stop: string; custom: boolean };
type Pattern = { text: string; kind: "open" | "close" | "stop"; custom: boolean };

export class OutputScanner {
  private held = "";
  /** The piece each UTF-16 unit of `held` came from (an index into `pieces`). */
  private owner: number[] = [];
  private readonly pieces: { visible: boolean; tokens: number }[] = [];
  /** The last piece counted toward reasoning tokens. */
  private counted = -1;
  private reasoning = 0;
  private thinking = false;
  private stopped: ScanStop | null = null;
  /** What is looked for outside a thought and inside one. */
  private readonly outside: Pattern[];
  private readonly inside: Pattern[];

  constructor(o: ScannerOptions) {
    const stops: Pattern[] = [
      ...o.stops.filter((s) => s.length > 0).map((text) => ({ text, kind: "stop" as const, custom: true })),
      ...o.templateStops.filter((s) => s.length > 0).map((text) => ({ text, kind: "stop" as const, custom: false })),
    ];
    const mark = (text: string | undefined, kind: "open" | "close"): Pattern[] => (text ? [{ text, kind, custom: false }] : []);
    this.outside = [...mark(o.thought?.open, "open"), ...stops];
    this.inside = [...mark(o.thought?.close, "close"), ...stops];
  }

  get stop(): ScanStop | null {
    return this.stopped;
  }

  /** Tokens of the pieces shown as reasoning so far. */
  get reasoningTokens(): number {
    return this.reasoning;
  }

  /**
   * Adds a piece of output (the text of `tokens` tokens); returns what can be shown now. After a
   * stop, nothing more is taken.
   */
  push(text: string, visible = true, tokens = 1): ScannedEvent[] {
    if (this.stopped || text.length === 0) return [];
    this.held += text;
    const piece = this.pieces.push({ visible, tokens }) - 1;
    for (let i = 0; i < text.length; i++) this.owner.push(piece);
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
        this.owner = [];
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

  private patterns(): Pattern[] {
    return this.thinking ? this.inside : this.outside;
  }

  /** The earliest complete pattern in what is held (the longer one where two start together). */
  private firstMatch() {
    let best: (Pattern & { at: number }) | null = null;
    for (const p of this.patterns()) {
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
    for (let i = 0; i < n; i++) {
      const piece = this.owner[i]!;
      if (!this.pieces[piece]!.visible) continue;
      text += this.held[i];
      if (this.thinking && piece > this.counted) {
        this.reasoning += this.pieces[piece]!.tokens;
        this.counted = piece;
      }
    }
    this.drop(n);
    if (!text) return;
    const type = this.thinking ? "reasoning" : "text";
    const last = out.at(-1);
    if (last?.type === type) last.text += text;
    else out.push({ type, text });
  }

  private drop(n: number) {
    this.held = this.held.slice(n);
    this.owner.splice(0, n);
  }
}
