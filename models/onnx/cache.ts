// Generated ONNX model folders in the shared model cache (models/cache.ts): keyed by preset, generator
// version and a hash of the spec, written into a unique temp folder and published by one rename,
// so concurrent test processes never see a half-written folder.

import { createHash, randomBytes } from "node:crypto";
import { existsSync, mkdirSync, renameSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import { defaultModelCacheDir } from "../cache";
import { ONNX_GENERATOR_VERSION, writeBertModel } from "./generate";
import { ONNX_PRESETS, type BertModelSpec, type OnnxPresetName } from "./presets";

/** Folder name for a spec: readable label plus a hash of everything that shapes the bytes. */
export function cachedOnnxFolderName(label: string, spec: BertModelSpec): string {
  const hash = createHash("sha256")
    .update(JSON.stringify({ version: ONNX_GENERATOR_VERSION, spec }))
    .digest("hex")
    .slice(0, 12);
  return `${label}.${ONNX_GENERATOR_VERSION}.${hash}`;
}

const inFlight = new Map<string, Promise<string>>();

/** Absolute path of the model folder for `spec`, generated into `dir` first if missing. */
export async function ensureOnnxModelSpec(label: string, spec: BertModelSpec, dir = defaultModelCacheDir()): Promise<string> {
  if (!/^[A-Za-z0-9._-]+$/.test(label)) throw new Error(`invalid model label "${label}"`);
  const target = join(resolve(dir), cachedOnnxFolderName(label, spec));
  if (existsSync(join(target, "config.json"))) return target;
  let pending = inFlight.get(target);
  if (!pending) {
    pending = Promise.resolve()
      .then(() => generateInto(target, spec))
      .finally(() => inFlight.delete(target));
    inFlight.set(target, pending);
  }
  return pending;
}

function generateInto(target: string, spec: BertModelSpec): string {
  mkdirSync(resolve(target, ".."), { recursive: true });
  const temp = `${target}.tmp-${process.pid}-${randomBytes(4).toString("hex")}`;
  try {
    writeBertModel(temp, spec);
    renameSync(temp, target);
  } catch (error) {
    rmSync(temp, { recursive: true, force: true });
    // Another process published the same (byte-identical) folder first: a folder cannot be
    // replaced by rename, so theirs stays.
    if (existsSync(join(target, "config.json"))) return target;
    throw error;
  }
  return target;
}

export function ensureOnnxModel(preset: OnnxPresetName, dir?: string): Promise<string> {
  return ensureOnnxModelSpec(preset, ONNX_PRESETS[preset], dir);
}
