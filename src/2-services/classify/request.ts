import { Type as T, type Static } from "@sinclair/typebox";

// POST /v1/classify request (spec §2.7): premise/hypothesis pairs or raw strings, declared once.
// Unknown fields are accepted (STYLE).

/** Spec §2.7: at most 256 items per request (of at most MAX_CLASSIFY_TOKENS each: src/lib/bounds.ts). */
export const MAX_CLASSIFY_ITEMS = 256;

export const ClassifyPair = T.Object({ premise: T.String(), hypothesis: T.String() });

export const ClassifyRequest = T.Object({
  model: T.String({ minLength: 1 }),
  pairs: T.Optional(T.Array(ClassifyPair)),
  /** Raw strings formatted by the caller, tokenized as given. */
  input: T.Optional(T.Array(T.String())),
});
export type ClassifyRequest = Static<typeof ClassifyRequest>;
