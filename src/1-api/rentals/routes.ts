import { Elysia } from "elysia";
import type { RentalsService } from "../../2-services/rentals/service";
import { contextOf, principalOf } from "../http/context";
import { rentalCallTo, type RentalEdge } from "./elsewhere";

// Rentals (spec §2.2, §2.3, §4 "Rentals"): thin routes; the logic lives in src/2-services/rentals. The
// rental scope is checked by auth for everything under /api/v1. On a cluster (issue 45) any node
// lists every live node's GPUs and reads every rental (the store is shared); a creation for another
// node's GPU, and the stop and logs of a rental another node runs, go to that node (elsewhere.ts).

export function rentalsRoutes(rentals: RentalsService, edge?: RentalEdge) {
  return new Elysia({ name: "rentals" })
    .get("/api/v1/gpus", async () => ({ object: "list" as const, data: await rentals.offered() }))
    .post("/api/v1/rentals", async ({ request, body }) => {
      const gpu = body && typeof body === "object" ? (body as { node_id?: unknown }).node_id : undefined;
      if (edge && typeof gpu === "string" && !contextOf(request).hop) {
        const home = await rentals.homeOfGpu(gpu);
        if (!home.here) return rentalCallTo(home, request, JSON.stringify(body), edge, `GPU node ${gpu}`);
      }
      return rentals.create(principalOf(request), (body ?? {}) as object, request.headers.get("idempotency-key"));
    })
    .get("/api/v1/rentals", ({ request }) => rentals.list(principalOf(request)))
    .get("/api/v1/rentals/:id", ({ request, params }) => rentals.get(principalOf(request), params.id))
    .get("/api/v1/rentals/:id/logs", async ({ request, params }) => {
      const home = edge ? await rentals.homeOf(principalOf(request), params.id, false) : { here: true as const };
      if (!home.here) return rentalCallTo(home, request, null, edge!, `rental ${params.id} (its log with it)`);
      return new Response(await rentals.logs(principalOf(request), params.id), { headers: { "content-type": "text/plain; charset=utf-8" } });
    })
    .delete("/api/v1/rentals/:id", async ({ request, params }) => {
      const home = edge ? await rentals.homeOf(principalOf(request), params.id, true) : { here: true as const };
      if (!home.here) return rentalCallTo(home, request, null, edge!, `rental ${params.id}`);
      return rentals.remove(principalOf(request), params.id);
    });
}
