import { Elysia } from "elysia";
import { modelControl, type ModelsRegistry } from "../../2-services/residency/service";
import { adminKeysOnly } from "../http/admin";

/**
 * The models' residency for operators (issue 28), the HTTP face of `appliance ps`:
 *   GET  /api/v1/admin/models               → {object:"list", data:[status]}
 *   POST /api/v1/admin/models/{id}/load     → the model's status once loaded (503 with the planner's reason when it cannot fit)
 *   POST /api/v1/admin/models/{id}/unload   → {id, result: "unloaded" | "when_idle" | "not_loaded"}
 * A key of any scope authenticates (src/1-api/http/auth.ts); only keys of admin accounts are
 * answered, as GET /metrics. Ids may contain "/": the POSTs are one wildcard route.
 */
export function adminModelsRoutes(deps: { registry: ModelsRegistry }) {
  const models = modelControl(deps.registry);
  const adminOnly = adminKeysOnly("/api/v1/admin");
  return new Elysia({ name: "admin-models" })
    .get("/api/v1/admin/models", ({ request }) => (adminOnly(request), models.list()))
    .post("/api/v1/admin/models/*", ({ request, params }) => (adminOnly(request), models.act(params["*"]))); // decoded by the edge (src/app.ts)
}
