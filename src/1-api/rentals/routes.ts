import { Elysia } from "elysia";
import { toGpuEntry } from "../../2-services/rentals/inventory";
import type { RentalsService } from "../../2-services/rentals/service";
import { principalOf } from "../http/context";

// Rentals (spec §2.2, §2.3, §4 "Rentals"): thin routes; the logic lives in src/2-services/rentals. The
// rental scope is checked by auth for everything under /api/v1.

export function rentalsRoutes(rentals: RentalsService) {
  return new Elysia({ name: "rentals" })
    .get("/api/v1/gpus", async () => ({ object: "list" as const, data: (await rentals.gpus()).map(toGpuEntry) }))
    .post("/api/v1/rentals", ({ request, body }) => rentals.create(principalOf(request), (body ?? {}) as object, request.headers.get("idempotency-key")))
    .get("/api/v1/rentals", ({ request }) => rentals.list(principalOf(request)))
    .get("/api/v1/rentals/:id", ({ request, params }) => rentals.get(principalOf(request), params.id))
    .get("/api/v1/rentals/:id/logs", async ({ request, params }) => new Response(await rentals.logs(principalOf(request), params.id), { headers: { "content-type": "text/plain; charset=utf-8" } }))
    .delete("/api/v1/rentals/:id", ({ request, params }) => rentals.remove(principalOf(request), params.id));
}
