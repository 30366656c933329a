import type { ModelKind } from "../../lib/manifest";

// The endpoints a batch may target (spec §2.10) and the kind of model each needs. How a line's body
// is checked and run is the live route's, given to the worker by the edge (lanes.ts).

export const BATCH_ENDPOINTS = {
  "/v1/chat/completions": { kind: "chat" },
  "/v1/responses": { kind: "chat" },
  "/v1/embeddings": { kind: "embedding" },
  "/v1/decisions": { kind: "chat" },
} as const satisfies Record<string, { kind: ModelKind }>;

export type BatchEndpoint = keyof typeof BATCH_ENDPOINTS;

export function isBatchEndpoint(e: string): e is BatchEndpoint {
  return Object.hasOwn(BATCH_ENDPOINTS, e);
}
