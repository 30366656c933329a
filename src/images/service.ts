import type { CapabilityDeps } from "../services";

// Placeholder while this capability is being written (issue 5); replaced in full.
export function createImagesService(_deps: CapabilityDeps) {
  return {};
}
export type ImagesService = ReturnType<typeof createImagesService>;
