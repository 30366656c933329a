import { Elysia } from "elysia";
import type { Clock } from "../lib/clock";
import type { Registry } from "../3-engines/registry";
import { VERSION } from "../lib/version";
import type { ClusterNode } from "../2-services/cluster/node";

/**
 * GET /health — no auth, for supervisors and load balancers. GET /api/hello — Claude Code's
 * connection probe (it sends HEAD /api/hello to its base URL before a session): the same answer.
 * HEAD on either (as on every GET route) is the GET's status and headers without the body.
 */
export function healthRoutes(deps: { clock: Clock; startedAt: number; registry: Registry; node: Pick<ClusterNode, "id" | "status"> }) {
  // A node that takes no new work (drained, or fenced from its cluster's store) is a 503 here, so a
  // load balancer sends the next requests elsewhere; the body says why.
  const health = ({ set }: { set: { status?: number | string } }) => {
    const node = deps.node.status();
    if (!node.accepting) set.status = 503;
    return {
      status: node.accepting ? "ok" : node.reason,
      version: VERSION,
      uptime_s: Math.floor((deps.clock.now() - deps.startedAt) / 1000),
      models: deps.registry.list().length,
      node: deps.node.id,
    };
  };
  return new Elysia({ name: "health" }).get("/health", health).get("/api/hello", health);
}
