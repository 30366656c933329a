import type { LedgerEffect } from "../../4-store/ledger";
import type { Answer } from "./questions";

// What a decision answers (issue 47), as the `openai` SDK 7.57 types `Decision`, and the options a
// call takes: shared by the chat-model and classifier paths of the service.

export interface DecisionCallOptions {
  requestId: string;
  endpoint?: string;
  batch?: boolean;
  signal?: AbortSignal;
  /** What commits with the charge, in one transaction (batch lines record their result this way). */
  record?: (response: DecisionResponse) => LedgerEffect;
}

export interface DecisionResponse {
  model: string;
  answers: Answer[];
  usage: {
    input_tokens: number;
    input_tokens_details: { cached_tokens: number; cache_write_tokens: number };
    output_tokens: number;
    output_tokens_details: { reasoning_tokens: number };
    total_tokens: number;
  };
}

/** The answer object, with usage: input tokens only (nothing is generated). */
export function decisionResponse(model: string, answers: Answer[], inputTokens: number, cachedTokens: number): DecisionResponse {
  return {
    model,
    answers,
    usage: {
      input_tokens: inputTokens,
      input_tokens_details: { cached_tokens: cachedTokens, cache_write_tokens: 0 },
      output_tokens: 0,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: inputTokens,
    },
  };
}
