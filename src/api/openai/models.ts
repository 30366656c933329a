import { Elysia } from "elysia";
import type { Registry } from "../../engines/registry";

// GET /v1/models (spec §2.1) in OpenAI's list envelope, each entry also carrying `kind`,
// and GET /v1/models/{id} for the SDKs' `models.retrieve`. Ids may contain "/".
export function modelsRoutes(registry: Registry) {
  // The served set is fixed at start, so the list is serialised once.
  const list = JSON.stringify({ object: "list", data: registry.list() });
  return new Elysia({ name: "openai-models" })
    .get("/v1/models", () => new Response(list, { headers: { "content-type": "application/json" } }))
    .get("/v1/models/*", ({ params }) => registry.entry(decodeURIComponent(params["*"])));
}
