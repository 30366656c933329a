import type { ModelKind } from "../../lib/manifest";

// The endpoints a batch may target (spec §2.10) and the kind of model each needs. How a line's body
// is checked and run is the live route's, given to the worker by the edge (lanes.ts).

export const BATCH_ENDPOINTS = {
  "/v1/chat/completions": { kinds: ["chat"] },
  "/v1/responses": { kinds: ["chat"] },
  "/v1/embeddings": { kinds: ["embedding"] },
  "/v1/decisions": { kinds: ["chat", "classifier"] },
  "/v1/rerank": { kinds: ["reranker"] },
} as const satisfies Record<string, { kinds: readonly ModelKind[] }>;

export type BatchEndpoint = keyof typeof BATCH_ENDPOINTS;

export function isBatchEndpoint(e: string): e is BatchEndpoint {
  return Object.hasOwn(BATCH_ENDPOINTS, e);
}
