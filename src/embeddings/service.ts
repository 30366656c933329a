import type { CapabilityDeps } from "../services";

// Placeholder while this capability is being written (issue 5); replaced in full.
export function createEmbeddingsService(_deps: CapabilityDeps) {
  return {};
}
export type EmbeddingsService = ReturnType<typeof createEmbeddingsService>;
