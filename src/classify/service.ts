import type { CapabilityDeps } from "../services";

// Placeholder while this capability is being written (issue 5); replaced in full.
export function createClassifyService(_deps: CapabilityDeps) {
  return {};
}
export type ClassifyService = ReturnType<typeof createClassifyService>;
