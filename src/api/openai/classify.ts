import { Type as T, type Static } from "@sinclair/typebox";
import { Elysia } from "elysia";
import type { AppDeps } from "../../services";
import { contextOf, principalOf } from "../http/context";

// POST /v1/classify (spec §2.7): premise/hypothesis pairs or raw strings → three-class NLI.
// The request schema is declared once; unknown fields are accepted (STYLE).

export const ClassifyPair = T.Object({ premise: T.String(), hypothesis: T.String() });

export const ClassifyRequest = T.Object({
  model: T.String({ minLength: 1 }),
  pairs: T.Optional(T.Array(ClassifyPair)),
  /** Raw strings formatted by the caller, tokenized as given. */
  input: T.Optional(T.Array(T.String())),
});
export type ClassifyRequest = Static<typeof ClassifyRequest>;

export function classifyRoutes(deps: AppDeps) {
  return new Elysia({ name: "classify" }).post(
    "/v1/classify",
    async ({ body, request }) => {
      try {
        const result = await deps.classify.classify(principalOf(request), body, {
          requestId: contextOf(request).id,
          endpoint: "/v1/classify",
          signal: request.signal,
        });
        return Response.json(result);
      } catch (e) {
        // The client left and its work was dropped: nobody reads this answer, and it is no server error.
        if (request.signal.aborted) return new Response(null, { status: 499 });
        throw e;
      }
    },
    { body: ClassifyRequest },
  );
}
