import { EmbeddingsRequest } from "../../embeddings/request";
import type { AppDeps } from "../../services";
import { capabilityRoute } from "../http/capability-route";

// POST /v1/embeddings (spec §2.9) in OpenAI's shape. The request schema is src/embeddings/request.ts.

export function embeddingsRoutes(deps: AppDeps) {
  return capabilityRoute("openai-embeddings", "/v1/embeddings", EmbeddingsRequest, (p, body, opts) => deps.embeddings.create(p, body, opts));
}
