import { Type as T } from "@sinclair/typebox";
import { Elysia } from "elysia";
import type { BatchesService } from "../../2-services/batches/service";
import { principalOf } from "../http/context";

// Batches (spec §2.10, §3, §4): POST /v1/batches, GET /v1/batches/{id}, GET /v1/batches (the
// key's own, newest first, after/limit/has_more), POST /v1/batches/{id}/cancel.

export const CreateBatchRequest = T.Object({
  input_file_id: T.String({ minLength: 1 }),
  // The allowed values are checked by the service (a named 400); described here for the document.
  endpoint: T.String({ minLength: 1, description: "/v1/chat/completions, /v1/responses or /v1/embeddings.", examples: ["/v1/chat/completions"] }),
  completion_window: T.String({ minLength: 1, description: 'Only "24h".', examples: ["24h"] }),
  metadata: T.Optional(T.Union([T.Record(T.String(), T.String()), T.Null()])),
});

const ListQuery = T.Object({ after: T.Optional(T.String()), limit: T.Optional(T.String({ pattern: "^[0-9]+$" })) });

export function batchesRoutes(batches: BatchesService) {
  return new Elysia({ name: "openai-batches" })
    .post("/v1/batches", ({ request, body }) => batches.create(principalOf(request), body), { body: CreateBatchRequest })
    .get("/v1/batches", ({ request, query }) =>
      batches.list(principalOf(request), { after: query.after, limit: query.limit === undefined ? undefined : Number(query.limit) }),
    { query: ListQuery })
    .get("/v1/batches/:id", ({ request, params }) => batches.get(principalOf(request), params.id))
    .post("/v1/batches/:id/cancel", ({ request, params }) => batches.cancel(principalOf(request), params.id));
}
