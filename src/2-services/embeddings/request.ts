import { Type as T, type Static } from "@sinclair/typebox";

// POST /v1/embeddings request (spec §2.9) in OpenAI's shape, declared once: it validates the HTTP
// body (api/openai/embeddings.ts) and batch lines. Unknown fields are accepted (STYLE).

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
