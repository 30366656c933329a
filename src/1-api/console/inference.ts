import { Elysia } from "elysia";
import type { AccountService } from "../../2-services/accounts/service";
import type { Principal } from "../../2-services/accounts/types";
import type { ConsoleAuth } from "../../2-services/console/auth";
import { clientAddressOf, contextOf, setClientAddress } from "../http/context";
import { ApiError } from "../http/errors";
import { requireSession } from "./session";

// The console's chat and tools call the inference API as the signed-in account (issue 48), with no
// key in the page: POST /console/api/v1/<endpoint> is checked as every console write is (the
// session cookie, same origin, the X-CSRF-Token), then served as POST /v1/<endpoint> through the
// whole API edge — scope, rate limits, credit holds, the meter, a cluster's forwarding — acting
// through the account's console key (accounts/service.ts consolePrincipal), under the same request
// id. The body goes through unchanged; the answer (a stream too) comes back unchanged, in the
// OpenAI format, whose error envelope the console reads.

/** The endpoints the console uses. */
export const CONSOLE_INFERENCE_ENDPOINTS = new Set(["chat/completions", "images/generations", "decisions", "rerank"]);

/** Serves `req` (a /v1 request the app made) as `principal`, under request id `id`. */
export type ServeAs = (req: Request, principal: Principal, id: string) => Promise<Response>;

export function consoleInferenceRoutes(auth: ConsoleAuth, accounts: AccountService, serveAs: ServeAs) {
  return new Elysia({ name: "console-inference" }).post("/console/api/v1/*", async ({ request, params, body }) => {
    const session = await requireSession(auth, request);
    const endpoint = params["*"];
    if (!CONSOLE_INFERENCE_ENDPOINTS.has(endpoint))
      throw new ApiError("not_found", `the console calls ${[...CONSOLE_INFERENCE_ENDPOINTS].map((e) => `/v1/${e}`).join(", ")}; not /v1/${endpoint.slice(0, 100)}`);
    if (typeof body !== "object" || body === null || Array.isArray(body)) throw new ApiError("invalid_request", "the body must be a JSON object (Content-Type: application/json)");
    const principal = await accounts.consolePrincipal(session.accountId);
    const url = new URL(request.url);
    url.pathname = `/v1/${endpoint}`;
    url.search = "";
    const inner = new Request(url, {
      method: "POST",
      headers: { "content-type": "application/json", accept: request.headers.get("accept") ?? "*/*" },
      body: JSON.stringify(body),
      // The page's Stop (or a closed tab) ends the work, as a client's disconnect does.
      signal: request.signal,
    });
    setClientAddress(inner, clientAddressOf(request));
    return serveAs(inner, principal, contextOf(request).id);
  });
}
