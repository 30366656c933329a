import { Type as T, type Static } from "@sinclair/typebox";
import { Value } from "@sinclair/typebox/value";
import { readdirSync, readFileSync } from "node:fs";
import { join, posix } from "node:path";
import { describeErrors } from "../../src/lib/config";
import { ModelKind, ModelManifest } from "../../src/lib/manifest";
import c_bge_reranker_v2_m3 from "./bge-reranker-v2-m3.json" with { type: "text" };
import c_demo_chat from "./demo-chat.json" with { type: "text" };
import c_demo_embed from "./demo-embed.json" with { type: "text" };
import c_demo_image from "./demo-image.json" with { type: "text" };
import c_demo_nli from "./demo-nli.json" with { type: "text" };
import c_demo_rerank from "./demo-rerank.json" with { type: "text" };
import c_demo_small_chat from "./demo-small-chat.json" with { type: "text" };
import c_demo_vision from "./demo-vision.json" with { type: "text" };
import c_gemma_3_27b_it from "./gemma-3-27b-it.json" with { type: "text" };
import c_multilingual_e5_small from "./multilingual-e5-small.json" with { type: "text" };
import c_nli_deberta_v3_base from "./nli-deberta-v3-base.json" with { type: "text" };
import c_qwen3_1_7b from "./qwen3-1.7b.json" with { type: "text" };
import c_sd_turbo from "./sd-turbo.json" with { type: "text" };
import c_z_image_turbo from "./z-image-turbo.json" with { type: "text" };

// The models catalogue: one JSON file per model the appliance knows how to get. A "download" entry
// names public files with their exact size and SHA-256 (pinned to a repository revision, so the
// checksums cannot drift); `appliance models pull` fetches them into <models_dir>/<id>/. A
// "generated" entry is one of the tiny --demo models (written by its generator, never pulled); a
// "manual" entry is a model with no verifiable download yet, listed with what to do instead.

const Sha256 = T.String({ pattern: "^[0-9a-f]{64}$" });

export const CatalogueFile = T.Object(
  {
    url: T.String({ pattern: "^https?://" }),
    path: T.String({ minLength: 1, description: "where the file goes, relative to the model's folder" }),
    bytes: T.Union([T.Integer({ minimum: 0 }), T.Null()], { description: "exact size; null = not recorded" }),
    sha256: T.Union([Sha256, T.Null()], { description: "null = not recorded: pull refuses without --allow-unverified" }),
    git_sha1: T.Optional(
      T.String({
        pattern: "^[0-9a-f]{40}$",
        description: "the git blob SHA-1 (sha1 of `blob <bytes>\\0` + the bytes): what a Hugging Face repository records for a file not kept in LFS",
      }),
    ),
  },
  { additionalProperties: false },
);
export type CatalogueFile = Static<typeof CatalogueFile>;

/** Manifest fields an entry adds to its [[models]] block; `files` paths are relative to the model's folder ("." = the folder). */
const ManifestExtras = T.Partial(T.Omit(ModelManifest, ["id", "name", "kind", "max_context", "vision"]), { additionalProperties: false });

const common = {
  id: ModelManifest.properties.id,
  name: T.String({ minLength: 1 }),
  kind: ModelKind,
  description: T.String({ minLength: 1 }),
  max_context: T.Integer({ minimum: 1 }),
  vision: T.Optional(T.Boolean()),
  license: T.Optional(T.String({ minLength: 1 })),
  repository: T.Optional(T.String({ pattern: "^https?://" })),
};

export const DownloadEntry = T.Object(
  {
    ...common,
    source: T.Optional(T.Literal("download")),
    revision: T.Optional(T.String({ minLength: 1 })),
    files: T.Record(T.String(), CatalogueFile, { minProperties: 1, description: "role → file" }),
    manifest: T.Optional(ManifestExtras),
  },
  { additionalProperties: false },
);
export type DownloadEntry = Static<typeof DownloadEntry>;

export const GeneratedEntry = T.Object(
  { ...common, source: T.Literal("generated"), generator: T.String({ minLength: 1, description: "the file that defines its generator" }) },
  { additionalProperties: false },
);
export type GeneratedEntry = Static<typeof GeneratedEntry>;

export const ManualEntry = T.Object(
  { ...common, source: T.Literal("manual"), instructions: T.String({ minLength: 1 }), manifest: T.Optional(ManifestExtras) },
  { additionalProperties: false },
);
export type ManualEntry = Static<typeof ManualEntry>;

/**
 * A model on a Hugging Face hub named by repository and commit instead of hashes: `pull` asks the
 * hub for that commit's records (each file's size and LFS SHA-256 or git blob SHA-1) and checks
 * every file against them (src/ops/pull/hf.ts). Files keep their path inside the repository.
 */
export const HubEntry = T.Object(
  {
    ...common,
    source: T.Literal("hf"),
    hf: T.Object(
      {
        repo: T.String({ pattern: "^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$" }),
        revision: T.String({ pattern: "^[0-9a-f]{40}$", description: "a commit: what the hub records for it cannot change" }),
        files: T.Record(
          T.String(),
          T.Union([
            T.String({ minLength: 1 }),
            T.Object(
              { path: T.String({ minLength: 1 }), bytes: T.Integer({ minimum: 0, description: "the size the hub records at that commit: pinned so the entry says what a pull costs" }) },
              { additionalProperties: false },
            ),
          ]),
          { minProperties: 1, description: "role → path in the repository (also its path in the model's folder), or {path, bytes}" },
        ),
      },
      { additionalProperties: false },
    ),
    manifest: T.Optional(ManifestExtras),
  },
  { additionalProperties: false },
);
export type HubEntry = Static<typeof HubEntry>;

export type CatalogueEntry = DownloadEntry | GeneratedEntry | ManualEntry | HubEntry;

export class CatalogueError extends Error {
  override name = "CatalogueError";
}

export const CATALOGUE_DIR = import.meta.dir;

/**
 * The shipped catalogue, embedded (the executable has no models/ folder): one line per JSON file
 * here; a test checks the folder and this list agree. (Imported as text: TypeScript types them as
 * parsed JSON, hence the casts.)
 */
export const EMBEDDED_CATALOGUE: Record<string, string> = {
  "bge-reranker-v2-m3.json": c_bge_reranker_v2_m3 as unknown as string,
  "demo-chat.json": c_demo_chat as unknown as string,
  "demo-embed.json": c_demo_embed as unknown as string,
  "demo-image.json": c_demo_image as unknown as string,
  "demo-nli.json": c_demo_nli as unknown as string,
  "demo-rerank.json": c_demo_rerank as unknown as string,
  "demo-small-chat.json": c_demo_small_chat as unknown as string,
  "demo-vision.json": c_demo_vision as unknown as string,
  "gemma-3-27b-it.json": c_gemma_3_27b_it as unknown as string,
  "multilingual-e5-small.json": c_multilingual_e5_small as unknown as string,
  "nli-deberta-v3-base.json": c_nli_deberta_v3_base as unknown as string,
  "qwen3-1.7b.json": c_qwen3_1_7b as unknown as string,
  "sd-turbo.json": c_sd_turbo as unknown as string,
  "z-image-turbo.json": c_z_image_turbo as unknown as string,
};

export function isDownload(e: CatalogueEntry): e is DownloadEntry {
  return e.source === undefined || e.source === "download";
}

/** Every entry of the catalogue in `dir` (default: this folder), validated; real models first, then the demo set, each by id. */
export function catalogue(dir?: string): CatalogueEntry[] {
  let names: string[];
  let text: (name: string) => string;
  if (dir === undefined) {
    dir = CATALOGUE_DIR;
    names = Object.keys(EMBEDDED_CATALOGUE).sort();
    text = (n) => EMBEDDED_CATALOGUE[n]!;
  } else {
    try {
      names = readdirSync(dir).filter((n) => n.endsWith(".json")).sort();
    } catch (e) {
      throw new CatalogueError(`catalogue ${dir}: ${(e as Error).message}`);
    }
    text = (n) => readFileSync(join(dir!, n), "utf8");
  }
  const entries = names.map((n) => parseEntry(text(n), join(dir!, n)));
  const seen = new Map<string, string>();
  for (const [i, e] of entries.entries()) {
    const other = seen.get(e.id);
    if (other) throw new CatalogueError(`${join(dir, names[i]!)}: id "${e.id}" is also used by ${other}`);
    seen.set(e.id, names[i]!);
  }
  const rank = (e: CatalogueEntry) => (e.source === "generated" ? 1 : 0);
  return entries.sort((a, b) => rank(a) - rank(b) || a.id.localeCompare(b.id));
}

/** One catalogue file's text, parsed and checked; problems name the file and the field. */
export function parseEntry(text: string, source = "catalogue entry"): CatalogueEntry {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new CatalogueError(`${source}: ${(e as Error).message}`);
  }
  const kind = (raw as { source?: unknown } | null)?.source;
  const schema = kind === "generated" ? GeneratedEntry : kind === "manual" ? ManualEntry : kind === "hf" ? HubEntry : DownloadEntry;
  const problems = describeErrors(schema, raw);
  if (problems.length) throw new CatalogueError(`${source}: invalid catalogue entry\n  ${problems.join("\n  ")}`);
  const entry = raw as CatalogueEntry;
  if (isDownload(entry)) checkPaths(entry, source);
  if (entry.source === "hf") checkHubPaths(entry, source);
  if (entry.vision && entry.kind !== "chat") throw new CatalogueError(`${source}: vision: only a chat model takes images`);
  return entry;
}

function checkPaths(e: DownloadEntry, source: string): void {
  const paths = new Set<string>();
  for (const [role, f] of Object.entries(e.files)) {
    if (!/^[A-Za-z0-9_]+$/.test(role)) throw new CatalogueError(`${source}: files: role "${role}" must be letters, digits and _`);
    if (!isSafeRelative(f.path)) throw new CatalogueError(`${source}: files.${role}.path: "${f.path}" must stay inside the model's folder`);
    if (paths.has(f.path)) throw new CatalogueError(`${source}: files.${role}.path: "${f.path}" is used twice`);
    paths.add(f.path);
  }
  for (const [role, p] of Object.entries(e.manifest?.files ?? {}))
    if (p !== "." && !isSafeRelative(p)) throw new CatalogueError(`${source}: manifest.files.${role}: "${p}" must stay inside the model's folder`);
  if (e.vision && !manifestFiles(e).mmproj) throw new CatalogueError(`${source}: a vision model needs an mmproj file`);
}

/** A hub entry's files with the size it pins for each (null where it names the path only). */
export function hubFiles(e: HubEntry): { role: string; path: string; bytes: number | null }[] {
  return Object.entries(e.hf.files).map(([role, f]) => (typeof f === "string" ? { role, path: f, bytes: null } : { role, ...f }));
}

function checkHubPaths(e: HubEntry, source: string): void {
  for (const { role, path: p } of hubFiles(e)) {
    if (!/^[A-Za-z0-9_]+$/.test(role)) throw new CatalogueError(`${source}: hf.files: role "${role}" must be letters, digits and _`);
    if (!isSafeRelative(p)) throw new CatalogueError(`${source}: hf.files.${role}: "${p}" must stay inside the model's folder`);
  }
  for (const [role, p] of Object.entries(e.manifest?.files ?? {}))
    if (p !== "." && !isSafeRelative(p)) throw new CatalogueError(`${source}: manifest.files.${role}: "${p}" must stay inside the model's folder`);
}

function isSafeRelative(p: string): boolean {
  if (p.includes("\\") || p.startsWith("/") || /^[A-Za-z]:/.test(p)) return false;
  const n = posix.normalize(p);
  return n === p && n !== "." && !n.startsWith("../") && n !== "..";
}

/** role → path inside the model's folder: `manifest.files` when given, else every downloaded file by its role. */
function manifestFiles(e: DownloadEntry): Record<string, string> {
  return e.manifest?.files ?? Object.fromEntries(Object.entries(e.files).map(([role, f]) => [role, f.path]));
}

/** The folder, relative to models_dir, that a pulled entry's files go into. */
export function modelFolder(e: CatalogueEntry): string {
  return e.id.replace(/[/:]/g, "_");
}

/**
 * The [[models]] manifest for a pulled entry, with file paths relative to models_dir (what config
 * resolves them against). Validated against the config's own schema, defaults filled.
 */
export function manifestFor(e: DownloadEntry): ModelManifest {
  const folder = modelFolder(e);
  const files = Object.fromEntries(Object.entries(manifestFiles(e)).map(([role, p]) => [role, p === "." ? folder : `${folder}/${p}`]));
  const raw = { ...e.manifest, id: e.id, name: e.name, kind: e.kind, max_context: e.max_context, vision: e.vision ?? false, files };
  const m = Value.Default(ModelManifest, Value.Clone(raw));
  const problems = describeErrors(ModelManifest, m);
  if (problems.length) throw new CatalogueError(`catalogue entry ${e.id}: its manifest is not valid\n  ${problems.join("\n  ")}`);
  return m as ModelManifest;
}

/** Sum of the recorded sizes, or null when one is not recorded. */
export function totalBytes(e: DownloadEntry): number | null {
  let sum = 0;
  for (const f of Object.values(e.files)) {
    if (f.bytes === null) return null;
    sum += f.bytes;
  }
  return sum;
}
