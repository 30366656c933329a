import { Elysia } from "elysia";
import type { AppDeps } from "../services";
import { VERSION } from "../version";

/** GET /health — no auth, for supervisors and load balancers. */
export function healthRoutes(deps: Pick<AppDeps, "clock" | "startedAt" | "registry">) {
  return new Elysia({ name: "health" }).get("/health", () => ({
    status: "ok",
    version: VERSION,
    uptime_s: Math.floor((deps.clock.now() - deps.startedAt) / 1000),
    models: deps.registry.list().length,
  }));
}
