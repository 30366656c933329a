import { LlamaText, SpecialTokensText, type ChatWrapper, type ChatWrapperGenerateContextStateOptions } from "node-llama-cpp";

// Images in a rendered prompt. Pure. Each image sits in its user message as a marker; the model's
// own chat template renders the history, and the marker is then replaced by a run of placeholder
// tokens as long as the image's span (the tokens llama.cpp's multimodal library gives it). The
// prompt's token list is therefore exact: its length counts the image tokens, and every position
// of an image holds a placeholder whose embedding the projector, not the vocabulary, supplies.

/** Marker text of image `i` of a request; `nonce` keeps user text from forging one. */
export const imageMarker = (nonce: string, i: number) => `\u2063img${nonce}:${i}\u2063`;
const MARKER = /\u2063img([0-9a-z]+):(\d+)\u2063/g;

/** `text` with `marker(k)` inserted at each offset (offsets into the original text, ascending). */
export function withMarkers(text: string, at: number[], marker: (k: number) => string, first: number): string {
  let out = "";
  let from = 0;
  at.forEach((offset, k) => {
    const o = Math.max(from, Math.min(offset, text.length));
    out += text.slice(from, o) + marker(first + k);
    from = o;
  });
  return out + text.slice(from);
}

/**
 * The chat wrapper with image markers rendered as placeholder runs. `runLength[i]` is the number of
 * tokens image i takes; `placeholder` is special-token text that tokenizes to exactly one token.
 */
export function imageChatWrapper(base: ChatWrapper, nonce: string, runLength: number[], placeholder: string): ChatWrapper {
  const replace = (text: LlamaText): LlamaText =>
    LlamaText(
      text.values.flatMap((v) => {
        if (typeof v !== "string" || !v.includes("\u2063img")) return [v];
        const parts: (string | SpecialTokensText)[] = [];
        let last = 0;
        for (const m of v.matchAll(MARKER)) {
          if (m[1] !== nonce) continue;
          const n = runLength[Number(m[2])];
          if (n === undefined) throw new Error(`image marker ${m[2]} has no image`);
          parts.push(v.slice(last, m.index), new SpecialTokensText(placeholder.repeat(n)));
          last = m.index! + m[0].length;
        }
        parts.push(v.slice(last));
        return parts.filter((p) => p !== "");
      }),
    );
  return new Proxy(base, {
    get(target, prop, receiver) {
      if (prop !== "generateContextState") return Reflect.get(target, prop, receiver);
      return (options: ChatWrapperGenerateContextStateOptions) => {
        const state = target.generateContextState(options);
        return { ...state, contextText: replace(state.contextText) };
      };
    },
  });
}

export interface ImageRun {
  start: number;
  length: number;
  /** Index of the image in the request. */
  image: number;
}

/**
 * Where the images' placeholder runs sit in `tokens`: consecutive placeholders are split by the
 * run lengths in order. Throws when the placeholders do not add up (the template dropped or
 * duplicated an image, or the placeholder token occurs in other text).
 */
export function locateRuns(tokens: readonly number[], placeholder: number, runLength: number[]): ImageRun[] {
  const runs: ImageRun[] = [];
  let image = 0;
  for (let i = 0; i < tokens.length; ) {
    if (tokens[i] !== placeholder) {
      i++;
      continue;
    }
    const n = runLength[image];
    if (n === undefined) throw new Error("the rendered prompt holds more image placeholders than the request has images");
    for (let k = 0; k < n; k++)
      if (tokens[i + k] !== placeholder) throw new Error(`image ${image} rendered with fewer placeholder tokens than its ${n}`);
    runs.push({ start: i, length: n, image });
    image++;
    i += n;
  }
  if (image !== runLength.length) throw new Error(`the rendered prompt holds ${image} of the request's ${runLength.length} images`);
  return runs;
}

/** What a sequence holds at an image's positions: the image's hash. */
export interface HeldImage {
  start: number;
  length: number;
  hash: string;
}

/**
 * Tokens of `tokens` a sequence can keep: the common prefix with what it holds, cut before the
 * first image run whose positions do not hold the same image (equal placeholders are not enough).
 */
export function reusablePrefix(common: number, runs: ImageRun[], hashes: string[], held: HeldImage[]): number {
  let reuse = common;
  for (const r of runs) {
    if (r.start >= reuse) break;
    const same = held.some((h) => h.start === r.start && h.length === r.length && h.hash === hashes[r.image]);
    if (!same || r.start + r.length > reuse) return r.start;
  }
  return reuse;
}
