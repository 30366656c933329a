import { Elysia } from "elysia";
import type { Clock } from "../lib/clock";
import type { Registry } from "../3-engines/registry";
import { VERSION } from "../lib/version";

/**
 * GET /health — no auth, for supervisors and load balancers. GET /api/hello — Claude Code's
 * connection probe (it sends HEAD /api/hello to its base URL before a session): the same answer.
 * HEAD on either (as on every GET route) is the GET's status and headers without the body.
 */
export function healthRoutes(deps: { clock: Clock; startedAt: number; registry: Registry }) {
  const health = () => ({
    status: "ok",
    version: VERSION,
    uptime_s: Math.floor((deps.clock.now() - deps.startedAt) / 1000),
    models: deps.registry.list().length,
  });
  return new Elysia({ name: "health" }).get("/health", health).get("/api/hello", health);
}
