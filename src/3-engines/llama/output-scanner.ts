import type { EngineEvent } from "../chat-job";
import type { CallSyntax } from "./tool-calls";

// Pure: splits a model's output text, as it arrives, into answer text, reasoning and tool calls,
// and finds where it stops. The generation loops (plain.ts, generation.ts) feed it each token's text.
//
// - Stop strings end the output where they start, anywhere (inside a thought or a call too); the
//   caller's own (`stop`) are reported by name, the chat template's (an end-of-turn marker written
//   out as text) are not.
// - A thought opens at `thought.open` and closes at `thought.close`; text inside is reasoning, the
//   markers themselves are dropped. With `thoughtOpenedInPrompt`, the output starts inside one.
// - Tool calls (`calls`, the template's call syntax written out; tool-calls.ts builds the grammar
//   that makes the model follow it): outside a thought, the call prefix starts a call. Its name
//   runs to `paramsPrefix` (event tool_call), then its arguments, streamed (tool_args) up to the
//   suffix. Arguments that open as JSON ({, [ or ") end where that value closes: a suffix written
//   inside a JSON string does not end them, and whatever comes between the value and the suffix is
//   not arguments (nor is the suffix required before another call's prefix). Other arguments end
//   where the suffix starts; trailing whitespace is never part of them. After a call, only the
//   prefix of another is looked for: anything else (the text between calls, the section's end,
//   stray text) is not shown.
// - Text that could still become a marker or a stop string is held back until it cannot; nothing
//   is cut or lost: `finish()` releases what is held when the output ends for another reason. In
//   a call, that is arguments only inside their open JSON value (a possible suffix or trailing
//   whitespace is not); a call cut off stays as far as it got.
// - A piece may be invisible (a control token, matched by its written form but never shown).
// - Reasoning tokens are those of the pieces with text shown as reasoning (a piece that is all
//   marker, such as the newline before `</think>`, is not one), each piece weighing its tokens.
//
// Never throws on odd text: model output is input (before or without a grammar, anything).

export interface ScannerOptions {
  /** The caller's stop strings, reported when matched. */
  stops: readonly string[];
  /** The template's stop strings (end of turn written as text). */
  templateStops: readonly string[];
  thought?: { open: string; close: string };
  /** The prompt ends inside an open thought: the output starts as reasoning. */
  thoughtOpenedInPrompt?: boolean;
  /** The template's call syntax: the output may call tools (prefix, paramsPrefix and suffix all needed). */
  calls?: CallSyntax;
}

export type ScannedEvent = Extract<EngineEvent, { type: "text" | "reasoning" | "tool_call" | "tool_args" }>;
export type ScanStop = { stop: string; custom: boolean };
export type ScannedCall = { name: string; arguments: string };

type Kind = "open" | "close" | "stop" | "call" | "params" | "suffix";
type Pattern = { text: string; kind: Kind; custom: boolean };
/**
 * text / thought: as shown; name: a call's name; args: its arguments; post: after the arguments'
 * JSON value closed, before the suffix; after: after a call's suffix.
 */
type Mode = "text" | "thought" | "name" | "args" | "post" | "after";

/** Where a JSON value stands, character by character (strings and nesting; nothing else is checked). */
interface Json {
  /** null: not begun (whitespace so far); false: the arguments are not JSON (followed to the suffix). */
  json: boolean | null;
  depth: number;
  inString: boolean;
  escaped: boolean;
}

const WHITESPACE = /\s/;

/** Feeds one character; returns true when it closes the value. */
function feedJson(j: Json, ch: string): boolean {
  if (j.json === false) return false;
  if (j.json === null) {
    if (WHITESPACE.test(ch)) return false;
    j.json = ch === "{" || ch === "[" || ch === '"';
    if (!j.json) return false;
  }
  if (j.inString) {
    if (j.escaped) j.escaped = false;
    else if (ch === "\\") j.escaped = true;
    else if (ch === '"') {
      j.inString = false;
      return j.depth === 0;
    }
    return false;
  }
  if (ch === '"') j.inString = true;
  else if (ch === "{" || ch === "[") j.depth++;
  else if (ch === "}" || ch === "]") return --j.depth <= 0;
  return false;
}

export class OutputScanner {
  private held = "";
  /** The piece each UTF-16 unit of `held` came from (an index into `pieces`). */
  private owner: number[] = [];
  private readonly pieces: { visible: boolean; tokens: number }[] = [];
  /** The last piece counted toward reasoning tokens. */
  private counted = -1;
  private reasoning = 0;
  private mode: Mode = "text";
  private stopped: ScanStop | null = null;
  private readonly found: ScannedCall[] = [];
  private name = "";
  private json: Json = { json: null, depth: 0, inString: false, escaped: false };
  private readonly patternsOf: Record<Mode, Pattern[]>;
  /** In a call's arguments while their JSON value is open: only stop strings end it. */
  private readonly stopsOnly: Pattern[];

  constructor(o: ScannerOptions) {
    const stops: Pattern[] = [
      ...o.stops.filter((s) => s.length > 0).map((text) => ({ text, kind: "stop" as const, custom: true })),
      ...o.templateStops.filter((s) => s.length > 0).map((text) => ({ text, kind: "stop" as const, custom: false })),
    ];
    const mark = (text: string | undefined, kind: Kind): Pattern[] => (text ? [{ text, kind, custom: false }] : []);
    const c = o.calls?.prefix && o.calls.paramsPrefix && o.calls.suffix ? o.calls : undefined;
    this.stopsOnly = stops;
    this.patternsOf = {
      text: [...mark(o.thought?.open, "open"), ...mark(c?.prefix, "call"), ...stops],
      thought: [...mark(o.thought?.close, "close"), ...stops],
      name: [...mark(c?.paramsPrefix, "params"), ...stops],
      args: [...mark(c?.suffix, "suffix"), ...stops],
      // a call's prefix there too: a model without a grammar may leave out the suffix's start
      post: [...mark(c?.suffix, "suffix"), ...mark(c?.prefix, "call"), ...stops],
      after: [...mark(c?.prefix, "call"), ...stops],
    };
    if (o.thoughtOpenedInPrompt && o.thought?.close) this.mode = "thought";
  }

  get stop(): ScanStop | null {
    return this.stopped;
  }

  /** Tokens of the pieces shown as reasoning so far. */
  get reasoningTokens(): number {
    return this.reasoning;
  }

  /** Whether the output is inside a thought (at its end: the thought was never closed). */
  get inThought(): boolean {
    return this.mode === "thought";
  }

  /**
   * The calls so far, in order: each one's name and its arguments as streamed (tool_args joined).
   * A call cut off (max tokens, a stop string) is here as far as it got, once its name is complete.
   */
  get calls(): ScannedCall[] {
    return this.found.map((c) => ({ ...c }));
  }

  /** The last call's arguments are complete: their JSON value closed, or the call's suffix came. */
  get callComplete(): boolean {
    return this.found.length > 0 && (this.mode === "post" || this.mode === "after");
  }

  /** A call has begun and its suffix has not come (its name or arguments may be incomplete). */
  get callOpen(): boolean {
    return this.mode === "name" || this.mode === "args" || this.mode === "post";
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
      let patterns = this.patternsOf[this.mode];
      if (this.mode === "args" && this.json.json !== false) {
        // JSON arguments run to where their value closes (unless a stop string comes first);
        // until then a suffix inside them (in a string) is not one
        const stop = this.firstMatch(this.stopsOnly);
        const value = this.value(stop ? stop.at : this.held.length);
        if (value.end >= 0) {
          this.release(value.end, out);
          this.mode = "post";
          continue;
        }
        if (value.json) patterns = this.stopsOnly;
      }
      const hit = this.firstMatch(patterns);
      if (!hit) {
        this.release(this.releasable(this.held.length - this.pendingLength(patterns)), out);
        return out;
      }
      const shown = this.releasable(hit.at);
      this.release(shown, out);
      // the marker, and in a call whitespace before it
      this.drop(hit.at - shown + hit.text.length);
      if (this.enter(hit, out)) return out;
    }
  }

  /** The output ended (end of generation, max tokens, abort): everything held that is text is shown. */
  finish(): ScannedEvent[] {
    const out: ScannedEvent[] = [];
    const text = this.mode === "text" || this.mode === "thought";
    // in an open JSON value, what is held is arguments (whitespace, a possible stop string)
    if (text || (this.mode === "args" && this.value(this.held.length).json)) this.release(this.releasable(this.held.length), out);
    this.drop(this.held.length);
    return out;
  }

  /** Applies a marker found (already dropped from what is held); true when the output stopped. */
  private enter(hit: Pattern, out: ScannedEvent[]): boolean {
    switch (hit.kind) {
      case "stop":
        this.stopped = { stop: hit.text, custom: hit.custom };
        this.drop(this.held.length);
        return true;
      case "open":
        this.mode = "thought";
        break;
      case "close":
        this.mode = "text";
        break;
      case "call":
        this.mode = "name";
        this.name = "";
        break;
      case "params":
        out.push({ type: "tool_call", index: this.found.length, name: this.name });
        this.found.push({ name: this.name, arguments: "" });
        this.mode = "args";
        this.json = { json: null, depth: 0, inString: false, escaped: false };
        break;
      case "suffix":
        this.mode = "after";
        break;
    }
    return false;
  }

  /** In a call's arguments, whitespace at the end is held until more text follows (or dropped). */
  private releasable(n: number): number {
    if (this.mode !== "args") return n;
    while (n > 0 && WHITESPACE.test(this.held[n - 1]!)) n--;
    return n;
  }

  /**
   * The arguments' JSON value over the first `limit` units held: where it closes (just past its
   * last character; -1: not there) and whether it has begun as JSON by then.
   */
  private value(limit: number): { end: number; json: boolean } {
    const j = { ...this.json };
    for (let i = 0; i < limit && j.json !== false; i++) {
      if (!this.pieces[this.owner[i]!]!.visible) continue;
      if (feedJson(j, this.held[i]!)) return { end: i + 1, json: true };
    }
    return { end: -1, json: j.json === true };
  }

  /** The earliest complete pattern in what is held (the longer one where two start together). */
  private firstMatch(patterns: Pattern[]) {
    let best: (Pattern & { at: number }) | null = null;
    for (const p of patterns) {
      const at = this.held.indexOf(p.text);
      if (at < 0) continue;
      if (!best || at < best.at || (at === best.at && p.text.length > best.text.length)) best = { at, ...p };
    }
    return best;
  }

  /** Length of the longest tail of what is held that a pattern could still start with. */
  private pendingLength(patterns: Pattern[]): number {
    let longest = 0;
    const held = this.held;
    for (const p of patterns)
      for (let k = Math.min(p.text.length - 1, held.length); k > longest; k--)
        // the tail's first unit against the pattern's first before comparing the rest (every token)
        if (held.charCodeAt(held.length - k) === p.text.charCodeAt(0) && held.endsWith(p.text.slice(0, k))) {
          longest = k;
          break;
        }
    return longest;
  }

  /** Takes the first `n` units held as what the current mode makes of them. */
  private release(n: number, out: ScannedEvent[]) {
    if (n <= 0) return;
    let text = "";
    // run by run of units from one piece
    for (let i = 0, j = 0; i < n; i = j) {
      const piece = this.owner[i]!;
      for (j = i + 1; j < n && this.owner[j] === piece; j++);
      if (!this.pieces[piece]!.visible) continue;
      text += this.held.slice(i, j);
      if (this.mode === "thought" && piece > this.counted) {
        this.reasoning += this.pieces[piece]!.tokens;
        this.counted = piece;
      }
    }
    this.drop(n);
    if (!text) return;
    switch (this.mode) {
      case "text":
      case "thought": {
        const type = this.mode === "thought" ? "reasoning" : "text";
        const last = out.at(-1);
        if (last?.type === type) last.text += text;
        else out.push({ type, text });
        return;
      }
      case "name":
        this.name += text;
        return;
      case "args": {
        for (const ch of text) feedJson(this.json, ch);
        const index = this.found.length - 1;
        this.found[index]!.arguments += text;
        const last = out.at(-1);
        if (last?.type === "tool_args" && last.index === index) last.text += text;
        else out.push({ type: "tool_args", index, text });
        return;
      }
      default:
        return; // after a call: not shown
    }
  }

  private drop(n: number) {
    this.held = this.held.slice(n);
    this.owner.splice(0, n);
  }
}
