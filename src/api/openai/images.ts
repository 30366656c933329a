import { Elysia } from "elysia";
import type { AppDeps } from "../../services";
import { contextOf, principalOf } from "../http/context";
import { ImagesRequest } from "../../images/request";

// POST /v1/images/generations (spec §2.8): JSON in, JSON out with data[].b64_json PNGs. Text to
// image only: /v1/images/edits and /v1/images/variations are not routes here (404).

export function imagesRoutes(deps: AppDeps) {
  return new Elysia({ name: "openai-images" }).post(
    "/v1/images/generations",
    async ({ body, request }) => {
      const rc = contextOf(request);
      try {
        const res = await deps.images.generate(principalOf(request), body, {
          requestId: rc.id,
          endpoint: "/v1/images/generations",
          signal: request.signal,
        });
        return Response.json(res);
      } catch (e) {
        // The client left and the generation stopped: nobody reads this answer; 499 ("client
        // closed request") keeps it out of the unexpected-error log.
        if (request.signal.aborted) return new Response(null, { status: 499 });
        throw e;
      }
    },
    { body: ImagesRequest },
  );
}
