import { Elysia } from "elysia";
import type { Registry } from "../../engines/registry";

// GET /v1/models (spec §2.1) in OpenAI's list envelope, each entry also carrying `kind`,
// and GET /v1/models/{id} for the SDKs' `models.retrieve`. Ids may contain "/".
export function modelsRoutes(registry: Registry) {
  return new Elysia({ name: "openai-models" })
    .get("/v1/models", () => ({ object: "list", data: registry.list() }))
    .get("/v1/models/*", ({ params }) => registry.entry(decodeURIComponent(params["*"])));
}
