import { Elysia } from "elysia";
import { ClassifyRequest } from "../../classify/request";
import type { AppDeps } from "../../services";
import { contextOf, principalOf } from "../http/context";

// POST /v1/classify (spec §2.7): premise/hypothesis pairs or raw strings → three-class NLI.
// The request schema is src/classify/request.ts.

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
