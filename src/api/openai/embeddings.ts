import { Type as T, type Static } from "@sinclair/typebox";
import { Elysia } from "elysia";
import type { AppDeps } from "../../services";
import { contextOf, principalOf } from "../http/context";

// POST /v1/embeddings (spec §2.9) in OpenAI's shape. The request schema is declared once: it
// validates the HTTP body and batch lines. Unknown fields are accepted (STYLE).

const TokenIds = T.Array(T.Integer({ minimum: 0 }));

export const EmbeddingsRequest = T.Object({
  model: T.String({ minLength: 1 }),
  /** A string, an array of strings, an array of token ids, or an array of token-id arrays. */
  input: T.Union([T.String(), T.Array(T.Union([T.String(), T.Integer({ minimum: 0 }), TokenIds]))]),
  encoding_format: T.Optional(T.Union([T.Literal("float"), T.Literal("base64")])),
  /** Accepted only as the model's own vector length (no shortening). */
  dimensions: T.Optional(T.Integer({ minimum: 1 })),
  user: T.Optional(T.String()),
});
export type EmbeddingsRequest = Static<typeof EmbeddingsRequest>;

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
