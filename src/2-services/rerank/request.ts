import { Type as T, type Static } from "@sinclair/typebox";

// POST /v1/rerank and /v2/rerank request (issue 47) in the shape Cohere's and Jina's clients send:
// a query and documents (strings, or objects with `text`), declared once: it validates the HTTP
// body and batch lines. Unknown fields are accepted (STYLE); `priority` (Cohere v2's scheduling
// hint) is accepted and has no effect here (documented in web/docs/api-capabilities.md).

/** Documents per request, at most (issue 47). */
export const MAX_RERANK_DOCUMENTS = 1000;

export const RerankDocument = T.Union([T.String(), T.Object({ text: T.String() })]);
export type RerankDocument = Static<typeof RerankDocument>;

export const RerankRequest = T.Object({
  model: T.String({ minLength: 1 }),
  query: T.String({ minLength: 1 }),
  /** 1 to MAX_RERANK_DOCUMENTS (more: 400 too_many_documents, checked by the service so it is named). */
  documents: T.Array(RerankDocument, { minItems: 1 }),
  /** The best `top_n` results; all when absent (or when larger than the list). */
  top_n: T.Optional(T.Union([T.Integer({ minimum: 1 }), T.Null()])),
  /** Each result carries its document as `{text}`; default false (Cohere's default). */
  return_documents: T.Optional(T.Union([T.Boolean(), T.Null()])),
  /** Cohere v2: each document cut to this many tokens before it is paired (as the model's own limit cuts it). */
  max_tokens_per_doc: T.Optional(T.Union([T.Integer({ minimum: 1 }), T.Null()])),
  /** Cohere v1's field for object documents: only "text" is read (anything else is refused). */
  rank_fields: T.Optional(T.Array(T.String())),
  priority: T.Optional(T.Union([T.Integer(), T.Null()])),
});
export type RerankRequest = Static<typeof RerankRequest>;
