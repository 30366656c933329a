import { existsSync, statSync } from "node:fs";
import { join } from "node:path";
import { catalogue as shippedCatalogue, hubFiles, isDownload, modelFolder, totalBytes, type CatalogueEntry, type DownloadEntry } from "../../../models/catalogue";
import { ApiError } from "../../lib/errors";
import { AddError, manifestForFolder, withModelBlock } from "./add";
import { HF_DEFAULT_CONTEXT, HfHub, isHfRef, parseHfRef, resolveHfGguf, resolveHubEntry, type HubOptions } from "./hf";
import { pullModel, PullError, unverifiedFiles } from "./pull";
import type { CatalogueRow, PullTools, ResolvedPull } from "../../2-services/console/pulls";

// What the console's pulls (src/2-services/console/pulls.ts) run: `appliance models pull` and
// `models add`, the same code. The request path imports nothing of ops/; the assembly
// (src/services.ts) hands these to the pull jobs. A source is a catalogue id or an hf: reference;
// what is wrong with it is a 400 naming it (the CLI's own sentence), a hub that cannot be reached a
// 502; a folder that makes no model, at add, a 409.

export interface ConsolePullOptions {
  /** Where pulls go: <data_dir>/models, as `appliance models pull`. */
  modelsDir: string;
  /** Default: the shipped catalogue. */
  catalogue?: () => CatalogueEntry[];
  /** The hub hf: sources and "hf" catalogue entries come from; default HF_ENDPOINT / HF_TOKEN. */
  hub?: HubOptions;
  /** How long asking the hub about a source may take; default 30 s. */
  hubTimeoutMs?: number;
}

export function consolePullTools(o: ConsolePullOptions): PullTools {
  const listed = o.catalogue ?? (() => shippedCatalogue());
  // Resolving a source asks the hub with no signal of its own: bounded here. A download passes its
  // pull's signal, and is not bounded.
  const base = o.hub?.fetch ?? ((url: string, init: RequestInit) => fetch(url, init));
  const timeout = o.hubTimeoutMs ?? 30_000;
  const hub = () => new HfHub({ ...o.hub, fetch: (url, init) => base(url, init.signal ? init : { ...init, signal: AbortSignal.timeout(timeout) }) });
  const folderOf = (e: CatalogueEntry) => join(o.modelsDir, modelFolder(e));

  function resolved(entry: DownloadEntry, o2: { commit: string | null; listed?: CatalogueEntry; fetch?: (url: string, init: RequestInit) => Promise<Response> }): ResolvedPull {
    return {
      model: entry.id,
      name: entry.name,
      kind: entry.kind,
      files: Object.entries(entry.files).map(([role, f]) => ({ role, path: f.path, bytes: f.bytes })),
      commit: o2.commit,
      dir: folderOf(entry),
      async run({ signal, onProgress }) {
        await pullModel(entry, { modelsDir: o.modelsDir, signal, onProgress, ...(o2.fetch ? { fetch: o2.fetch } : {}) });
      },
      async addTo({ text, file, modelsDir, replace }) {
        try {
          // A new file sets models_dir to the models dir, as `models add` writes one.
          const current = text ?? `# appliance config, written by the console's Models page\nmodels_dir = ${JSON.stringify(o.modelsDir)}\n`;
          const manifest = await manifestForFolder({ id: entry.id, dir: folderOf(entry), modelsDir: text === null ? o.modelsDir : modelsDir, entry: o2.listed });
          return { text: withModelBlock(current, manifest, { replace, file }), manifest };
        } catch (e) {
          if (e instanceof AddError) throw new ApiError("conflict", e.message);
          throw e;
        }
      },
    };
  }

  return {
    modelsDir: o.modelsDir,

    catalogue(): CatalogueRow[] {
      return listed().map((e) => {
        const files = isDownload(e) ? Object.values(e.files).map((f) => ({ path: f.path, bytes: f.bytes })) : e.source === "hf" ? hubFiles(e) : [];
        const bytes = isDownload(e) ? totalBytes(e) : files.length && files.every((f) => f.bytes !== null) ? files.reduce((a, f) => a + f.bytes!, 0) : null;
        const pullable = isDownload(e) ? unverifiedFiles(e).length === 0 : e.source === "hf";
        return { id: e.id, name: e.name, kind: e.kind, description: e.description, source: e.source ?? "download", bytes, pullable, status: pullable ? folderStatus(folderOf(e), files) : null };
      });
    },

    async resolve(source: string): Promise<ResolvedPull> {
      const h = hub();
      try {
        if (isHfRef(source)) {
          const { entry, commit } = await resolveHfGguf(parseHfRef(source), h, { maxContext: HF_DEFAULT_CONTEXT });
          return resolved(entry, { commit, fetch: h.fetch });
        }
        const e = listed().find((x) => x.id === source);
        if (!e) throw new ApiError("invalid_request", `no model "${source}" in the catalogue: choose one of its ids, or give hf:OWNER/REPO[:QUANT]`, { param: "source" });
        if (e.source === "generated") throw new ApiError("invalid_request", `"${source}" is a generated demo model, not a download: \`appliance serve --demo\` writes it`, { param: "source" });
        if (e.source === "manual") throw new ApiError("invalid_request", `"${source}" has no verifiable download: ${e.instructions}`, { param: "source" });
        if (e.source === "hf") return resolved(await resolveHubEntry(e, h), { commit: e.hf.revision, listed: e, fetch: h.fetch });
        const unverified = unverifiedFiles(e);
        if (unverified.length)
          throw new ApiError("invalid_request", `"${source}": no checksum recorded for ${unverified.join(", ")}; the console takes verified downloads only (\`appliance models pull --allow-unverified\` takes them)`, {
            param: "source",
          });
        return resolved(e, { commit: null, listed: e, ...(o.hub?.fetch ? { fetch: o.hub.fetch } : {}) });
      } catch (e) {
        if (e instanceof ApiError) throw e;
        // What the hub answered about the source (not found, no such quantisation, gated): the
        // source's problem. The hub failing or out of reach is not.
        if (e instanceof PullError && !/HTTP (?:5\d\d|429)\b/.test(e.message)) throw new ApiError("invalid_request", e.message, { param: "source" });
        throw new ApiError("upstream_error", `could not ask ${h.endpoint} about ${source}: ${(e as Error).message}`);
      }
    },
  };
}

/** Whether a model's files are in its folder: all (with their recorded size), some or a .part, or none. */
function folderStatus(dir: string, files: { path: string; bytes: number | null }[]): CatalogueRow["status"] {
  const complete = files.filter((f) => {
    const p = join(dir, f.path);
    return existsSync(p) && (f.bytes === null || statSync(p).size === f.bytes);
  }).length;
  if (files.length && complete === files.length) return "present";
  return complete > 0 || files.some((f) => existsSync(join(dir, `${f.path}.part`))) ? "partial" : "missing";
}
