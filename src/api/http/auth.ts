import type { AccountService } from "../../accounts/service";
import type { Principal, Scope } from "../../accounts/types";
import { ApiError, formatFor } from "./errors";

// Spec §5: `Authorization: Bearer <key>` everywhere; `x-api-key` also on the Messages endpoints —
// and on the model list for Anthropic clients, which send it (with `anthropic-version`) there too.
// Every path under /v1 and /api/v1 authenticates; /api/v1 (rentals) also needs the rental scope.
// /metrics authenticates too (any scope; admin accounts only, checked by its route).

export function requiredScope(path: string): Scope | null {
  if (path === "/api/v1" || path.startsWith("/api/v1/")) return "rental";
  if (path === "/v1" || path.startsWith("/v1/")) return "inference";
  return null;
}

/**
 * Paths outside /v1 and /api/v1 that still need a valid key (of any scope): GET /metrics, whose
 * route then answers only keys of admin accounts, and the API's description (/openapi.json and
 * its readable page /reference).
 */
export function needsKeyWithoutScope(path: string): boolean {
  return path === "/metrics" || path === "/openapi.json" || path === "/reference";
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

export function authenticateRequest(accounts: AccountService, headers: Headers, path: string): Principal {
  const key = presentedKey(headers, path);
  const principal = key ? accounts.authenticate(key) : null;
  if (!principal) throw new ApiError("invalid_api_key", "Invalid API key");
  return principal;
}

export function requireScope(principal: Principal, scope: Scope): void {
  if (!principal.scopes.includes(scope)) {
    const how = scope === "rental" ? " (enable the GPU Rentals scope on the key in the console or with `appliance keys scope`)" : "";
    throw new ApiError("missing_scope", `this key lacks the ${scope} scope${how}`);
  }
}
