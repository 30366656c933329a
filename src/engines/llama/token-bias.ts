import type { LlamaModel, Token, TokenBias } from "node-llama-cpp";
import { ApiError } from "../../api/http/errors";

// node-llama-cpp's TokenBias, read and written through its bias map (`_biases`: token -> logit
// added, -Infinity for never), which is what node-llama-cpp itself hands its sampler.

const mapOf = (bias: TokenBias): Map<Token, number> | null => {
  const map = (bias as unknown as { _biases?: unknown })._biases;
  return map instanceof Map ? (map as Map<Token, number>) : null;
};

/**
 * Sets a token's logit bias, end-of-generation tokens included. `TokenBias.set` skips those
 * silently (node-llama-cpp: "has no effect and will be ignored"), so a caller's `logit_bias` of
 * -100 on `<|im_end|>`, the usual way to make a model write on to max_tokens, was dropped and the
 * answer ended anyway (llama-server and OpenAI apply it). The bias map `set` fills, which is what
 * node-llama-cpp hands the sampler, is written directly; a version without it refuses such a
 * bias instead of ignoring it.
 */
export function setBias(model: LlamaModel, bias: TokenBias, token: Token, logit: number): void {
  const map = mapOf(bias);
  if (map) return void map.set(token, logit);
  if (model.isEogToken(token))
    throw new ApiError("invalid_request", `logit_bias: token ${token} ends generation, and this engine build cannot bias it`, { param: `logit_bias.${token}` });
  bias.set(token, logit === -Infinity ? "never" : { logit });
}

/** A bias's tokens and logits as typed arrays (for the native sampler); null if this version keeps them elsewhere. */
export function biasArrays(bias: TokenBias): { tokens: Uint32Array; logits: Float32Array } | null {
  const map = mapOf(bias);
  if (!map) return null;
  const tokens = new Uint32Array(map.size);
  const logits = new Float32Array(map.size);
  let i = 0;
  for (const [token, logit] of map) {
    tokens[i] = token;
    logits[i++] = logit;
  }
  return { tokens, logits };
}
