import { RerankRequest } from "../../2-services/rerank/request";
import type { RerankService } from "../../2-services/rerank/service";
import { capabilityRoute } from "../http/capability-route";

// POST /v1/rerank (Jina's and llama-server's path) and POST /v2/rerank (Cohere's v2 clients, the AI
// SDK's Cohere provider among them): one service, one shape (issue 47). Errors on /v2/rerank carry
// Cohere's top-level `message` beside OpenAI's envelope (src/1-api/http/errors.ts).

export function rerankRoutes(deps: { rerank: RerankService }) {
  return capabilityRoute("rerank", "/v1/rerank", RerankRequest, (p, body, opts) => deps.rerank.rerank(p, body, opts)).use(
    capabilityRoute("rerank-v2", "/v2/rerank", RerankRequest, (p, body, opts) => deps.rerank.rerank(p, body, opts)),
  );
}
