import { Elysia } from "elysia";
import { scrapeResponse, type ScrapeDeps } from "../2-services/metrics/collect";
import { adminKeysOnly } from "./http/admin";

/**
 * GET /metrics — Prometheus text exposition, for keys of admin accounts only (the edge has
 * authenticated the key: 401 without one). The optional unauthenticated listener is
 * src/2-services/metrics/listen.ts.
 */
export function metricsRoutes(deps: ScrapeDeps) {
  const adminOnly = adminKeysOnly("/metrics");
  return new Elysia({ name: "metrics" }).get("/metrics", ({ request }) => (adminOnly(request), scrapeResponse(deps)));
}
