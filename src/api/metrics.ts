import { Elysia } from "elysia";
import { scrapeResponse, type ScrapeDeps } from "../metrics/collect";
import { accountsRepo } from "../store/accounts";
import { principalOf } from "./http/context";
import { ApiError } from "./http/errors";

/**
 * GET /metrics — Prometheus text exposition, for keys of admin accounts only (the edge has
 * authenticated the key: 401 without one). The optional unauthenticated listener is
 * src/metrics/listen.ts.
 */
export function metricsRoutes(deps: ScrapeDeps) {
  const accounts = accountsRepo(deps.db);
  return new Elysia({ name: "metrics" }).get("/metrics", ({ request }) => {
    const principal = principalOf(request);
    if (accounts.byId(principal.accountId)?.role !== "admin") throw new ApiError("admin_only", "/metrics needs a key of an admin account");
    return scrapeResponse(deps);
  });
}
