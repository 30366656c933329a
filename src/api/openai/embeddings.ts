import { Elysia } from "elysia";
import type { AppDeps } from "../../services";

// Placeholder while /v1/embeddings is being written (issue 5); replaced in full.
export function embeddingsRoutes(_deps: AppDeps) {
  return new Elysia({ name: "openai-embeddings" });
}
