// Test helper: make a random-weight model emit an exact text by biasing generation, token by token.
//
// Usage with LlamaChat / LlamaChatSession:
//   chat.generateResponse(history, { tokenBias: forceText(model, '<tool_call>\n{"name": "'), ... })
//
// The returned function is called by node-llama-cpp once per generated token. The first N calls
// each force the next token of `text` (tokenized with special tokens parsed); after that it returns
// an empty bias and the model (or a grammar) continues on its own.

import { TokenBias, type LlamaModel, type Token } from "node-llama-cpp";

/** Added to the forced token's logit; random-model logits are within a few units of zero. */
const FORCE_LOGIT = 1000;

export interface ForcedText {
  (): TokenBias;
  /** The tokens being forced, in order. */
  readonly tokens: readonly Token[];
  /** How many of them have been forced so far. */
  readonly forced: number;
  /** Start over from the first token (e.g. before another generation). */
  reset(): void;
}

export function forceTokens(model: LlamaModel, tokens: readonly Token[]): ForcedText {
  for (const token of tokens)
    if (model.tokenizer.isEogToken(token)) throw new Error(`cannot force end-of-generation token ${token}: TokenBias ignores it`);
  let next = 0;
  const empty = new TokenBias(model.tokenizer);
  const biases = tokens.map((token) => new TokenBias(model.tokenizer).set(token, { logit: FORCE_LOGIT }));
  const fn = (() => (next < biases.length ? biases[next++]! : empty)) as ForcedText;
  Object.defineProperty(fn, "tokens", { value: Object.freeze([...tokens]) });
  Object.defineProperty(fn, "forced", { get: () => next });
  fn.reset = () => {
    next = 0;
  };
  return fn;
}

/** Forces the tokenization of `text` (special tokens such as `<tool_call>` parsed as single tokens). */
export function forceText(model: LlamaModel, text: string): ForcedText {
  return forceTokens(model, model.tokenize(text, true));
}
