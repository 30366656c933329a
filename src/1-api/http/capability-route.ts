import { Elysia } from "elysia";
import type { Static, TSchema } from "@sinclair/typebox";
import type { Principal } from "../../2-services/accounts/types";
import { contextOf, principalOf } from "./context";

// The shape every JSON-in, JSON-out capability route shares (embeddings, classify, images): the
// body checked against the capability's request schema (its 400 in OpenAI's shape), the service
// called with the caller's principal, this request's id (the id it is charged under), the
// endpoint recorded on the usage row, and the client's signal; the answer as JSON.

export interface CapabilityCall {
  requestId: string;
  endpoint: string;
  signal: AbortSignal;
}

export function capabilityRoute<S extends TSchema>(
  name: string,
  path: string,
  body: S,
  call: (principal: Principal, body: Static<S>, opts: CapabilityCall) => Promise<unknown>,
) {
  return new Elysia({ name }).post(
    path,
    async ({ body: parsed, request }) => {
      try {
        const result = await call(principalOf(request), parsed as Static<S>, { requestId: contextOf(request).id, endpoint: path, signal: request.signal });
        return Response.json(result);
      } catch (e) {
        // The client left and its work was dropped: nobody reads this answer; 499 ("client closed
        // request") keeps it out of the unexpected-error log.
        if (request.signal.aborted) return new Response(null, { status: 499 });
        throw e;
      }
    },
    { body },
  );
}
