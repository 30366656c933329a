import type { LlamaModel } from "node-llama-cpp";
import { llamaAddon } from "./native/addon-path";
import { nativeModel } from "./native/handles";

// The text of generated tokens as they stream (issue 29). Each token's bytes are looked up once per
// model (native/pieces.cpp) and joined here, so a streamed token costs a table lookup instead of
// node-llama-cpp's detokenize of the last few tokens for context (three native calls and copies
// a token, a fifth of the JavaScript a streamed token cost). The text is what detokenizing the
// whole output gives: a character split across tokens comes once it is complete, a SentencePiece
// vocabulary's space prefix is dropped at the start of the output only, and a control token has no
// shown text, only its written form (matched as a marker, never shown).

interface Piece {
  bytes: Uint8Array;
  /** The piece's leading space is the one llama.cpp drops at the start of a text. */
  spacePrefix: boolean;
  /** The bytes are whole UTF-8 characters: their text, decoded once. */
  text: string | null;
}

interface Addon {
  tokenPiece(model: unknown, token: number, special: boolean): { bytes: Uint8Array; spacePrefix: boolean };
}

const decoder = new TextDecoder("utf-8", { ignoreBOM: true });

/** Bytes at the end of `b` that begin a UTF-8 character not complete yet (0 when none). */
export function incompleteTail(b: Uint8Array): number {
  for (let k = 1; k <= Math.min(3, b.length); k++) {
    const c = b[b.length - k]!;
    if ((c & 0xc0) === 0x80) continue; // a continuation byte: look further back
    // a lead byte: how long its character is (an invalid lead is complete: one U+FFFD)
    const need = c >= 0xf5 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 1;
    return need > k ? k : 0;
  }
  return 0;
}

/** One model's token pieces, looked up as they are first generated. */
export class TokenPieces {
  private readonly shown: (Piece | undefined)[] = [];
  private readonly written: (Piece | undefined)[] = [];
  private readonly addon: Addon;
  private readonly native: unknown;

  constructor(model: LlamaModel) {
    const addon = llamaAddon<Partial<Addon>>();
    if (typeof addon?.tokenPiece !== "function") throw new Error("the llama addon has no tokenPiece (an older build: run ./install.sh)");
    this.addon = addon as Addon;
    this.native = nativeModel(model);
  }

  /** A token's piece: as shown (`special` false: empty for a control token) or as written. */
  piece(token: number, special: boolean): Piece {
    const cache = special ? this.written : this.shown;
    let p = cache[token];
    if (!p) {
      const { bytes, spacePrefix } = this.addon.tokenPiece(this.native, token, special);
      const whole = incompleteTail(bytes) === 0 && (bytes.length === 0 || (bytes[0]! & 0xc0) !== 0x80);
      p = { bytes, spacePrefix, text: whole ? decoder.decode(bytes) : null };
      cache[token] = p;
    }
    return p;
  }
}

/** What one token added to the output. */
export interface TokenText {
  text: string;
  /** False for a control token: `text` is its written form, matched but never shown. */
  visible: boolean;
  /** Tokens the text came from: more than one when a character was split across them. */
  tokens: number;
}

/** A generation's output text, token by token. */
export class OutputText {
  /** Bytes of a character not complete yet. */
  private partial: Uint8Array | null = null;
  /** Tokens pushed since text last came out. */
  private waiting = 0;
  private atStart = true;

  constructor(private readonly pieces: TokenPieces) {}

  /**
   * The text `token` completes, or null while a character is still incomplete. The `last` token
   * (cut off by max_tokens): the bytes of a character it leaves incomplete are not text, and are left
   * out, as node-llama-cpp's LlamaChat leaves them out.
   */
  push(token: number, last = false): TokenText | null {
    const p = this.pieces.piece(token, false);
    if (p.bytes.length === 0) {
      const written = this.pieces.piece(token, true);
      const text = written.text ?? decoder.decode(written.bytes);
      return text ? { text, visible: false, tokens: 1 } : null;
    }
    this.waiting++;
    let text: string;
    if (!this.partial && p.text !== null) text = p.text;
    else {
      const joined = this.partial ? concat(this.partial, p.bytes) : p.bytes;
      const held = incompleteTail(joined);
      this.partial = held && !last ? joined.slice(joined.length - held) : null;
      if (held === joined.length) return null;
      text = decoder.decode(held ? joined.subarray(0, joined.length - held) : joined);
    }
    if (last && text.endsWith("\uFFFD")) text = text.replace(/\uFFFD+$/, "");
    if (this.atStart && p.spacePrefix && text.startsWith(" ")) text = text.slice(1);
    this.atStart = false;
    const tokens = this.waiting;
    this.waiting = 0;
    return { text, visible: true, tokens };
  }

  /** The bytes of a character the output ended inside (not by max_tokens: push's `last` dropped them), as U+FFFD. */
  end(): TokenText | null {
    const partial = this.partial;
    const tokens = this.waiting;
    this.partial = null;
    this.waiting = 0;
    return partial ? { text: decoder.decode(partial), visible: true, tokens } : null;
  }
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}
