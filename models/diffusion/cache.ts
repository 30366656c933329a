// The tiny diffusion sets in the shared model cache (as models/cache.ts does for GGUF files): one
// folder per preset, keyed by generator version and a hash of the spec, written into a temp folder
// and renamed into place, so concurrent test processes never see a half-written set.

import { createHash, randomBytes } from "node:crypto";
import { existsSync, mkdirSync, renameSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import { defaultModelCacheDir } from "../cache";
import { DIFFUSION_GENERATOR_VERSION, DIFFUSION_PRESETS, writeDiffusionModel, type DiffusionModelSpec, type DiffusionPresetName } from "./generate";

export function cachedDiffusionFolderName(label: string, spec: DiffusionModelSpec): string {
  const hash = createHash("sha256")
    .update(JSON.stringify({ version: DIFFUSION_GENERATOR_VERSION, spec }))
    .digest("hex")
    .slice(0, 12);
  return `${label}.${DIFFUSION_GENERATOR_VERSION}.${hash}`;
}

/** The folder of `preset` under `dir` (the shared cache by default), generated first if missing. */
export function ensureDiffusionModel(preset: DiffusionPresetName, dir = defaultModelCacheDir()): string {
  const spec = DIFFUSION_PRESETS[preset];
  return ensureGeneratedFolder(join(resolve(dir), cachedDiffusionFolderName(preset, spec)), "model_index.json", (temp) => writeDiffusionModel(temp, spec));
}

/**
 * `target`, written by `write` into a temp folder and renamed into place unless `marker` (a file
 * inside it) is already there; another process publishing the same set first wins.
 */
export function ensureGeneratedFolder(target: string, marker: string, write: (temp: string) => void): string {
  if (existsSync(join(target, marker))) return target;
  mkdirSync(join(target, ".."), { recursive: true });
  const temp = `${target}.tmp-${process.pid}-${randomBytes(4).toString("hex")}`;
  try {
    write(temp);
    renameSync(temp, target);
  } catch (error) {
    rmSync(temp, { recursive: true, force: true });
    // Another process published the same (byte-identical) set first: use it.
    if (!existsSync(join(target, marker))) throw error;
  }
  return target;
}
