import { Elysia } from "elysia";
import type { AppDeps } from "../services";
import { VERSION } from "../version";

/**
 * GET /health — no auth, for supervisors and load balancers. GET /api/hello — Claude Code's
 * connection probe (it sends HEAD /api/hello to its base URL before a session): the same answer.
 * HEAD on either (as on every GET route) is the GET's status and headers without the body.
 */
export function healthRoutes(deps: Pick<AppDeps, "clock" | "startedAt" | "registry">) {
  const health = () => ({
    status: "ok",
    version: VERSION,
    uptime_s: Math.floor((deps.clock.now() - deps.startedAt) / 1000),
    models: deps.registry.list().length,
  });
  return new Elysia({ name: "health" }).get("/health", health).get("/api/hello", health);
}
