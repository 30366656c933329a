import { Elysia } from "elysia";
import type { ConsoleAuth } from "../../2-services/console/auth";
import type { PullJobs } from "../../2-services/console/pulls";
import { ApiError } from "../http/errors";
import { requireAdmin, requireSession } from "./session";

// The console's model management for admins (issue 48): the catalogue, pulls with their progress,
// adding a pulled model to the config, and a model's memory plan before it is loaded. Loading and
// unloading are the console's existing routes (routes.ts). Every route needs an admin's session;
// writes also its CSRF token and the same origin (session.ts). The logic: src/2-services/console/pulls.ts.
//
//   GET  /console/api/admin/catalogue            → {models_dir, data: [{id, name, kind, description, source, bytes, pullable, status, configured, pulling}]}
//   GET  /console/api/admin/pulls                → {data: [pull]} (newest first; finished ones for an hour)
//   POST /console/api/admin/pulls {source}       → 202 pull (source: a catalogue id or hf:OWNER/REPO[@REV][:QUANT|/FILE])
//   GET  /console/api/admin/pulls/:id            → pull
//   POST /console/api/admin/pulls/:id/cancel     → pull (cancelled; its .part files kept)
//   POST /console/api/admin/pulls/:id/add {replace?} → {pull, file, created, replaced, manifest, reload, served}
//   GET  /console/api/admin/models/:id/plan      → {id, kind, state, fits, device, memory_mb, …} (ids with "/" percent-encoded)

const bodyOf = (b: unknown): Record<string, unknown> => {
  if (b === undefined || b === null || b === "") return {};
  if (typeof b !== "object" || Array.isArray(b)) throw new ApiError("invalid_request", "the body must be a JSON object");
  return b as Record<string, unknown>;
};

export function consoleAdminModelsRoutes(auth: ConsoleAuth, pulls: PullJobs) {
  const admin = async (req: Request) => requireAdmin(await requireSession(auth, req));
  return (
    new Elysia({ name: "console-admin-models" })
      .get("/console/api/admin/catalogue", async ({ request }) => (await admin(request), pulls.catalogue()))
      .get("/console/api/admin/pulls", async ({ request }) => (await admin(request), pulls.list()))
      .post("/console/api/admin/pulls", async ({ request, body, set }) => {
        await admin(request);
        const pull = await pulls.start(bodyOf(body));
        set.status = 202;
        return pull;
      })
      .get("/console/api/admin/pulls/:id", async ({ request, params }) => (await admin(request), pulls.get(params.id)))
      .post("/console/api/admin/pulls/:id/cancel", async ({ request, params }) => (await admin(request), pulls.cancel(params.id)))
      .post("/console/api/admin/pulls/:id/add", async ({ request, params, body }) => (await admin(request), pulls.add(params.id, bodyOf(body))))
      .get("/console/api/admin/models/:id/plan", async ({ request, params }) => (await admin(request), pulls.plan(params.id)))
  );
}
