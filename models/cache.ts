// Shared on-disk cache of generated models, so test processes generate each preset once.
// Files are keyed by preset, generator version and a hash of the spec, and published atomically
// (write to a unique temp file, then rename) so concurrent readers never see half-written files.

import { createHash, randomBytes } from "node:crypto";
import { existsSync, mkdirSync, renameSync, rmSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { GENERATOR_VERSION, writeChatModel } from "./generate-chat";
import { getChatPreset, type ChatModelSpec, type ChatPresetName } from "./presets";

/** `<repo>/.cache/models`, unless APPLIANCE_MODEL_CACHE names another folder. */
export function defaultModelCacheDir(): string {
  const fromEnv = process.env.APPLIANCE_MODEL_CACHE;
  if (fromEnv) return resolve(fromEnv);
  return resolve(import.meta.dir, "..", ".cache", "models");
}

/** File name for a spec: readable preset name plus a hash of everything that shapes the bytes. */
export function cachedModelFileName(label: string, spec: ChatModelSpec): string {
  const hash = createHash("sha256")
    .update(JSON.stringify({ version: GENERATOR_VERSION, spec }))
    .digest("hex")
    .slice(0, 12);
  return `${label}.${GENERATOR_VERSION}.${hash}.gguf`;
}

/** Generations in flight in this process, so concurrent callers share one. */
const inFlight = new Map<string, Promise<string>>();

/** Same as ensureChatModel for an arbitrary spec (label names the file). */
export async function ensureChatModelSpec(label: string, spec: ChatModelSpec, dir = defaultModelCacheDir()): Promise<string> {
  if (!/^[A-Za-z0-9._-]+$/.test(label)) throw new Error(`invalid model label "${label}"`);
  const target = join(resolve(dir), cachedModelFileName(label, spec));
  if (existsSync(target)) return target;
  let pending = inFlight.get(target);
  if (!pending) {
    pending = generateInto(target, spec).finally(() => inFlight.delete(target));
    inFlight.set(target, pending);
  }
  return pending;
}

async function generateInto(target: string, spec: ChatModelSpec): Promise<string> {
  mkdirSync(dirname(target), { recursive: true });
  const temp = `${target}.tmp-${process.pid}-${randomBytes(4).toString("hex")}`;
  try {
    await writeChatModel(temp, spec);
    // Another process may have published the same (byte-identical) file meanwhile; rename replaces it atomically.
    renameSync(temp, target);
  } catch (error) {
    rmSync(temp, { force: true });
    throw error;
  }
  return target;
}

/**
 * Returns the absolute path of the GGUF for `preset`, generating it into the cache folder first if
 * it is not there yet.
 */
export async function ensureChatModel(preset: ChatPresetName, dir?: string): Promise<string> {
  return ensureChatModelSpec(preset, getChatPreset(preset), dir);
}
