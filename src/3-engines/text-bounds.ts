import { ApiError } from "../lib/errors";

// Text longer than its model could take is refused before a tokenizer runs on it (issue 41: the
// tokenizers of the embedding and classifier models run on the event loop, and one 20 MB input
// held every route for 18-36 s before its 400 for the length). No text a model takes is longer
// than this many characters a token (prose is ~4, code and URLs ~3; a tokenizer's unknown token
// can stand for a longer run, and such input is refused as well).

export const CHARS_PER_TOKEN_MAX = 16;

/** Throws context_length_exceeded for a text of `chars` characters when `maxTokens` tokens cannot hold it. */
export function refuseLongText(chars: number, maxTokens: number, param: string, model: string, unit: string): void {
  if (chars <= maxTokens * CHARS_PER_TOKEN_MAX) return;
  throw new ApiError(
    "context_length_exceeded",
    `${param} is ${chars} characters; model "${model}" takes at most ${maxTokens} tokens per ${unit}, and no text over ${maxTokens * CHARS_PER_TOKEN_MAX} characters (${CHARS_PER_TOKEN_MAX} a token) is tokenized (${unit}s are never truncated)`,
    { param },
  );
}
