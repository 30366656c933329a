import type { TSchema } from "@sinclair/typebox";
import { Value, type ValueError } from "@sinclair/typebox/value";
import { ChatRequest } from "../chat/request";
import { EmbeddingsRequest } from "../embeddings/request";
import { requestErrors as responsesErrors } from "../api/responses/schema";
import type { ModelKind } from "../engines/manifest";

// The endpoints a batch may target (spec §2.10), each with the very schema its live route
// validates with, and the kind of model it needs.

export const BATCH_ENDPOINTS = {
  "/v1/chat/completions": { kind: "chat", errors: (body: unknown) => [...Value.Errors(ChatRequest as TSchema, body)] },
  "/v1/responses": { kind: "chat", errors: responsesErrors },
  "/v1/embeddings": { kind: "embedding", errors: (body: unknown) => [...Value.Errors(EmbeddingsRequest as TSchema, body)] },
} as const satisfies Record<string, { kind: ModelKind; errors: (body: unknown) => ValueError[] }>;

export type BatchEndpoint = keyof typeof BATCH_ENDPOINTS;

export function isBatchEndpoint(e: string): e is BatchEndpoint {
  return Object.hasOwn(BATCH_ENDPOINTS, e);
}
