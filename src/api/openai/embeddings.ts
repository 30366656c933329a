import { Elysia } from "elysia";
import { EmbeddingsRequest } from "../../embeddings/request";
import type { AppDeps } from "../../services";
import { contextOf, principalOf } from "../http/context";

// POST /v1/embeddings (spec §2.9) in OpenAI's shape. The request schema is src/embeddings/request.ts.

export function embeddingsRoutes(deps: AppDeps) {
  return new Elysia({ name: "openai-embeddings" }).post(
    "/v1/embeddings",
    async ({ body, request }) => {
      try {
        const result = await deps.embeddings.create(principalOf(request), body, {
          requestId: contextOf(request).id,
          endpoint: "/v1/embeddings",
          signal: request.signal,
        });
        return Response.json(result);
      } catch (e) {
        // The client left and its work was dropped: nobody reads this answer, and it is no server error.
        if (request.signal.aborted) return new Response(null, { status: 499 });
        throw e;
      }
    },
    { body: EmbeddingsRequest },
  );
}
