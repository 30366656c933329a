// Shared on-disk cache of generated mmproj files, next to the chat models (same folder, same
// pattern as cache.ts): keyed by preset, generator version and spec hash, published atomically.

import { createHash } from "node:crypto";
import { join, resolve } from "node:path";
import { defaultModelCacheDir, ensureGenerated } from "./cache";
import { PROJECTOR_GENERATOR_VERSION, getProjectorPreset, writeProjector, type ProjectorSpec } from "./generate-mmproj";

/** File name for a spec: readable preset name plus a hash of everything that shapes the bytes. */
export function cachedProjectorFileName(label: string, spec: ProjectorSpec): string {
  const hash = createHash("sha256")
    .update(JSON.stringify({ version: PROJECTOR_GENERATOR_VERSION, spec }))
    .digest("hex")
    .slice(0, 12);
  return `${label}.${PROJECTOR_GENERATOR_VERSION}.${hash}.gguf`;
}

/**
 * Returns the absolute path of the mmproj GGUF for `preset`, generating it into the cache folder
 * first if it is not there yet.
 */
export async function ensureProjector(preset = "chat-vision", dir = defaultModelCacheDir()): Promise<string> {
  if (!/^[A-Za-z0-9._-]+$/.test(preset)) throw new Error(`invalid projector preset "${preset}"`);
  const spec = getProjectorPreset(preset);
  return ensureGenerated(join(resolve(dir), cachedProjectorFileName(preset, spec)), (temp) => writeProjector(temp, spec));
}
