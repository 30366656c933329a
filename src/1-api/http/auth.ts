import type { AccountService } from "../../2-services/accounts/service";
import type { Principal, Scope } from "../../2-services/accounts/types";
import { ApiError, formatFor } from "./errors";

// Spec §5: `Authorization: Bearer <key>` everywhere; `x-api-key` also on the Messages endpoints —
// and on the model list for Anthropic clients, which send it (with `anthropic-version`) there too.
// Who may call a route is decided on the route the router matched (its pattern), never on the raw
// path: `/openapi.json/` is the route `/openapi.json`, and must ask for a key as it does.

/** The scope a route's pattern needs: /api/v1 (rentals) the rental scope, /v1 the inference scope. */
export function requiredScope(route: string): Scope | null {
  if (route === "/api/v1" || route.startsWith("/api/v1/")) return "rental";
  // The inference API: OpenAI's and Anthropic's /v1, and Cohere's /v2 (rerank).
  if (route === "/v1" || route.startsWith("/v1/") || route.startsWith("/v2/")) return "inference";
  return null;
}

export type Access = { key: false } | { key: true; scope: Scope | null };

/** Routes that answer without a key: health (and Claude Code's probe of it), and the web console (its own sessions, src/1-api/console). */
const PUBLIC = new Set(["/", "/health", "/api/hello", "/console"]);

/**
 * Who may call a matched route. Every route needs a key unless it is public — GET /metrics (whose
 * route then answers only keys of admin accounts) and the API's description (/openapi.json,
 * /reference) need one of any scope — so a route added later is closed until it is opened here.
 */
export function accessOf(route: string): Access {
  if (PUBLIC.has(route) || route.startsWith("/console/")) return { key: false };
  // A rental's notebook through the proxy: authenticated by the rental's notebook token, which the
  // route itself checks (src/1-api/rentals/proxy.ts), never by an API key.
  if (route === "/rentals/:id" || route === "/rentals/:id/*") return { key: false };
  // The admin API (/api/v1/admin/…): a key of any scope, answered only for admin accounts (the
  // routes check, as GET /metrics does). Decided here, not in requiredScope, so an unknown path
  // under it is still a 401 without a key.
  if (route.startsWith("/api/v1/admin/")) return { key: true, scope: null };
  return { key: true, scope: requiredScope(route) };
}

export function presentedKey(headers: Headers, path: string): string | null {
  const auth = headers.get("authorization");
  if (auth) {
    const m = /^\s*bearer\s+(\S+)\s*$/i.exec(auth);
    if (m) return m[1]!;
  }
  if (formatFor(path, headers) === "anthropic") {
    const k = headers.get("x-api-key");
    if (k) return k.trim();
  }
  return null;
}

export async function authenticateRequest(accounts: AccountService, headers: Headers, path: string): Promise<Principal> {
  const key = presentedKey(headers, path);
  const principal = key ? await accounts.authenticate(key) : null;
  if (!principal) throw new ApiError("invalid_api_key", "Invalid API key");
  return principal;
}

export function requireScope(principal: Principal, scope: Scope): void {
  if (!principal.scopes.includes(scope)) {
    const how = scope === "rental" ? " (enable the GPU Rentals scope on the key in the console or with `appliance keys scope`)" : "";
    throw new ApiError("missing_scope", `this key lacks the ${scope} scope${how}`);
  }
}
