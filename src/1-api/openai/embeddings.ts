import { EmbeddingsRequest } from "../../2-services/embeddings/request";
import type { EmbeddingsService } from "../../2-services/embeddings/service";
import { capabilityRoute } from "../http/capability-route";

// POST /v1/embeddings (spec §2.9) in OpenAI's shape. The request schema is src/2-services/embeddings/request.ts.

export function embeddingsRoutes(deps: { embeddings: EmbeddingsService }) {
  return capabilityRoute("openai-embeddings", "/v1/embeddings", EmbeddingsRequest, (p, body, opts) => deps.embeddings.create(p, body, opts));
}
