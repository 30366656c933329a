import { existsSync, readdirSync, statSync } from "node:fs";
import { basename, join } from "node:path";
import { ApiError } from "../lib/errors";
import { GgufFormatError, ggufVerdict, withSplitParts } from "./gguf-check";
import type { ModelManifest } from "../lib/manifest";

// A model's files before its engine reads them (issue 41, M2): which are GGUF (every part of a
// split one included), their headers checked, and how long a load of them may take.

/** Files a model's engine reads as GGUF: every file of a chat model (llama.cpp reads nothing else), and any *.gguf. */
export function ggufFiles(m: ModelManifest, file: (role: string) => string): { role: string; path: string }[] {
  const named = Object.keys(m.files)
    .map((role) => ({ role, path: file(role) }))
    .filter(({ path }) => (m.kind === "chat" || path.toLowerCase().endsWith(".gguf")) && existsSync(path) && statSync(path).isFile());
  // the parts of a split GGUF the manifest does not name, which the engine opens by name
  const seen = new Set(named.map((f) => f.path));
  const parts: { role: string; path: string }[] = [];
  for (const { role, path } of named)
    for (const p of withSplitParts(path).slice(1)) {
      if (seen.has(p)) continue;
      seen.add(p);
      parts.push({ role: `${role} (split part ${basename(p)})`, path: p });
    }
  return [...named, ...parts];
}

/** A GGUF format error as the model's load failure: its reason for clients (no path), the error itself as the cause (the log's line has the path). */
export function ggufLoadError(m: ModelManifest, role: string, e: GgufFormatError): ApiError {
  const err = new ApiError("model_load_failed", `model "${m.id}" cannot be loaded: its ${role} file is ${e.reason}`);
  (err as { cause?: unknown }).cause = e;
  return err;
}

/** The GGUF headers of `m`'s files, checked before anything reads them (once per version of each file). */
export async function checkGgufHeaders(m: ModelManifest, file: (role: string) => string, signal: AbortSignal): Promise<void> {
  for (const { role, path } of ggufFiles(m, file)) {
    try {
      await ggufVerdict(path, { signal });
    } catch (e) {
      if (e instanceof GgufFormatError) throw ggufLoadError(m, role, e);
      throw e;
    }
  }
}

/** Bytes of a model's files (folders summed, a few levels down): what the default load bound scales with. */
function filesBytes(paths: string[]): number {
  let total = 0;
  const walk = (p: string, depth: number) => {
    try {
      const st = statSync(p);
      if (st.isFile()) total += st.size;
      else if (st.isDirectory() && depth < 4) for (const name of readdirSync(p)) walk(join(p, name), depth + 1);
    } catch {} // a file that vanished counts nothing; the load says what is wrong
  };
  for (const p of paths) walk(p, 0);
  return total;
}

/** Seconds of the default bound, then seconds per GiB of the model's files (reading at 51 MB/s at least). */
export const LOAD_TIMEOUT_BASE_S = 120;
export const LOAD_TIMEOUT_PER_GIB_S = 20;

/** How long one load of `m` may take: its load_timeout_s, else 120 s plus 20 s per GiB of its files. */
export function loadTimeoutS(m: ModelManifest, file: (role: string) => string): number {
  if (m.load_timeout_s !== undefined) return m.load_timeout_s;
  const bytes = filesBytes(Object.keys(m.files).map((role) => file(role)));
  return Math.ceil(LOAD_TIMEOUT_BASE_S + (LOAD_TIMEOUT_PER_GIB_S * bytes) / 1024 ** 3);
}
