import { Command } from "commander";
import { existsSync, statSync } from "node:fs";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import {
  catalogue,
  CatalogueError,
  hubFiles,
  isDownload,
  manifestFor,
  modelFolder,
  totalBytes,
  type CatalogueEntry,
  type DownloadEntry,
} from "../../models/catalogue";
import { loadConfig, type Config } from "../../src/lib/config";
import type { ModelManifest } from "../../src/lib/manifest";
import { checkModelFiles } from "../../src/3-engines/registry";
import { AddError, manifestForFolder, manifestToml, withModelBlock } from "../../src/ops/pull/add";
import { HF_DEFAULT_CONTEXT, HfHub, hfModelId, isHfRef, parseHfRef, quantOf, resolveHfGguf, resolveHubEntry, trainedContext } from "../../src/ops/pull/hf";
import { runningServerPid } from "../../src/4-store/lock";
import { pullModel, PullError, unverifiedFiles, type PullProgress } from "../../src/ops/pull/pull";
import { configTarget, replaceConfigFile, targetConfig } from "../config-file";
import { globals } from "../context";
import { emit, fail, table, UsageError } from "../output";

// `appliance models list|pull|add`: the catalogue (models/catalogue/*.json) against a models dir, by
// default <data_dir>/models. A pull prints the [[models]] block to add to config.toml; it does not
// edit the config (the operator decides what is served). `add` is that decision: it appends the
// block, made from the pulled files' own metadata, to the config file, keeping its comments.

interface ModelsOptions {
  modelsDir?: string;
  catalogue?: string;
}

function setup(c: Command): { config: Config; modelsDir: string; entries: CatalogueEntry[] } {
  const g = globals(c);
  const o = c.optsWithGlobals() as ModelsOptions;
  const { config } = loadConfig({ file: g.config, flags: { dataDir: g.dataDir } });
  const modelsDir = resolve(o.modelsDir ?? join(config.server.data_dir, "models"));
  return { config, modelsDir, entries: catalogue(o.catalogue ? resolve(o.catalogue) : undefined) };
}

function failClean(e: unknown): never {
  fail(e instanceof PullError || e instanceof CatalogueError || e instanceof AddError ? new UsageError(e.message) : e);
}

export { manifestToml };

export interface EntryStatus {
  id: string;
  name: string;
  kind: CatalogueEntry["kind"];
  source: "download" | "generated" | "manual";
  bytes: number | null;
  status: "present" | "partial" | "missing" | "generated" | "manual";
  where: string | null;
  verified: boolean;
  configured: boolean;
}

/** Whether a model's files are in its folder: all (with their recorded size, when there is one), some or a .part, or none. */
function folderStatus(dir: string, files: { path: string; bytes: number | null }[]): Pick<EntryStatus, "status" | "where"> {
  const complete = files.filter((f) => {
    const p = join(dir, f.path);
    return existsSync(p) && (f.bytes === null || statSync(p).size === f.bytes);
  }).length;
  const started = complete > 0 || files.some((f) => existsSync(join(dir, `${f.path}.part`)));
  return { status: complete === files.length ? "present" : started ? "partial" : "missing", where: started ? dir : null };
}

function statusOf(e: CatalogueEntry, modelsDir: string, config: Config): EntryStatus {
  const base = { id: e.id, name: e.name, kind: e.kind, configured: config.models.some((m) => m.id === e.id) };
  if (e.source === "hf") {
    // hashes (and sizes the entry does not pin) come from the hub at pull time
    const files = hubFiles(e);
    const bytes = files.every((f) => f.bytes !== null) ? files.reduce((a, f) => a + f.bytes!, 0) : null;
    return { ...base, source: "download", bytes, ...folderStatus(join(modelsDir, modelFolder(e)), files), verified: true };
  }
  if (!isDownload(e)) {
    const demoDir = join(config.server.data_dir, "demo-models");
    return {
      ...base,
      source: e.source,
      bytes: null,
      status: e.source,
      where: e.source === "generated" && existsSync(demoDir) ? demoDir : null,
      verified: true,
    };
  }
  return {
    ...base,
    source: "download",
    bytes: totalBytes(e),
    ...folderStatus(join(modelsDir, modelFolder(e)), Object.values(e.files)),
    verified: unverifiedFiles(e).length === 0,
  };
}

export function formatBytes(n: number | null): string {
  if (n === null) return "?";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let v = n;
  let u = 0;
  while (v >= 1000 && u < units.length - 1) {
    v /= 1000;
    u++;
  }
  return u === 0 ? `${n} B` : `${v.toFixed(1)} ${units[u]}`;
}

function listHuman(rows: EntryStatus[], modelsDir: string): string {
  const label = (r: EntryStatus) =>
    r.status === "generated" ? "generated (serve --demo)" : r.status === "manual" ? "not pullable (see pull)" : r.status + (r.verified ? "" : ", unverified");
  return [
    `models dir: ${modelsDir}`,
    table(
      rows.map((r) => ({
        id: r.id,
        kind: r.kind,
        size: r.source === "download" ? formatBytes(r.bytes) : "-",
        status: label(r),
        config: r.configured ? "yes" : "no",
        where: r.where ?? "-",
      })),
      ["id", "kind", "size", "status", "config", "where"],
    ),
  ].join("\n");
}

export function configSnippet(m: ModelManifest, modelsDir: string): string {
  return [
    "# Add to config.toml. File paths are relative to models_dir, which must be set at the top level",
    "# (before any [section]):",
    `#   models_dir = ${JSON.stringify(modelsDir)}`,
    manifestToml(m),
  ].join("\n");
}

function formatDuration(s: number): string {
  if (!Number.isFinite(s) || s < 0) return "?";
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = Math.floor(s % 60);
  return h ? `${h}h${String(m).padStart(2, "0")}m` : m ? `${m}m${String(sec).padStart(2, "0")}s` : `${sec}s`;
}

/**
 * Progress on stderr: a redrawn bar on a terminal; plain lines otherwise (file start and end,
 * retries, and one line every `everyMs` while downloading) so logs stay readable.
 */
export function progressPrinter(out: { write(s: string): unknown; isTTY?: boolean }, everyMs = 10_000) {
  let lastLine = 0;
  let open = false;
  const bar = (p: PullProgress) => {
    const width = 24;
    const ratio = p.bytesTotal ? Math.min(1, p.bytesDone / p.bytesTotal) : 0;
    const filled = Math.round(ratio * width);
    const eta = p.rate > 0 && p.bytesTotal ? ` ETA ${formatDuration((p.bytesTotal - p.bytesDone) / p.rate)}` : "";
    return (
      `[${"#".repeat(filled)}${"-".repeat(width - filled)}] ${p.bytesTotal ? `${String(Math.floor(ratio * 100)).padStart(3)}%` : "   ?"} ` +
      `${formatBytes(p.bytesDone)} / ${formatBytes(p.bytesTotal)} ${formatBytes(Math.round(p.rate))}/s${eta}  ${p.file}`
    );
  };
  const line = (s: string) => {
    if (open) out.write("\n");
    open = false;
    out.write(s + "\n");
  };
  const counter = (p: PullProgress) => `[${p.fileIndex + 1}/${p.fileCount}]`;
  return {
    onProgress(p: PullProgress) {
      if (p.phase === "start") return line(`${counter(p)} ${p.file} (${formatBytes(p.bytesTotal)})${p.bytesDone ? `, resuming at ${formatBytes(p.bytesDone)}` : ""}`);
      if (p.phase === "skip") return line(`${counter(p)} ${p.file} already present (${formatBytes(p.bytesDone)})`);
      if (p.phase === "done") return line(`${counter(p)} ${p.file} verified (${formatBytes(p.bytesDone)})`);
      if (p.phase === "retry") return line(`${counter(p)} ${p.file}: ${p.message}`);
      if (out.isTTY) {
        out.write(`\r\x1b[K${p.phase === "hash" ? `hashing ${formatBytes(p.bytesDone)} of ${p.file}` : bar(p)}`);
        open = true;
        return;
      }
      const now = Date.now();
      if (p.phase === "download" && now - lastLine >= everyMs) {
        lastLine = now;
        line(bar(p));
      }
    },
    finish() {
      if (open) out.write("\n");
      open = false;
    },
  };
}

/**
 * `models pull hf:…`: the GGUF (and a vision repo's projector) at the commit the revision names now,
 * checked against the hub's records; served with the model's trained context up to HF_DEFAULT_CONTEXT.
 */
async function pullHf(
  ref: string,
  modelsDir: string,
  o: { allowUnverified?: boolean; verify?: boolean; json?: boolean; signal: AbortSignal; onProgress: (p: PullProgress) => void },
  finish: () => void,
): Promise<void> {
  const hub = new HfHub();
  const parsed = parseHfRef(ref);
  const { entry, commit } = await resolveHfGguf(parsed, hub, { maxContext: HF_DEFAULT_CONTEXT });
  process.stderr.write(`pulling ${ref} (commit ${commit}, ${formatBytes(totalBytes(entry))}) into ${join(modelsDir, modelFolder(entry))}\n`);
  const result = await pullModel(entry, { modelsDir, allowUnverified: o.allowUnverified, verify: o.verify, signal: o.signal, onProgress: o.onProgress, fetch: hub.fetch });
  finish();
  const trained = await trainedContext(join(modelsDir, modelFolder(entry), entry.files.model!.path)).catch(() => null);
  if (trained !== null) entry.max_context = Math.min(trained, HF_DEFAULT_CONTEXT);
  const manifest = manifestFor(entry);
  emit(o.json, { ...result, commit, models_dir: modelsDir, manifest }, () => configSnippet(manifest, modelsDir));
}

export function modelsCommand(): Command {
  const cmd = new Command("models").description("the models catalogue: list it, pull a model's files with checksums");
  const shared = (sub: Command) =>
    sub
      .option("--models-dir <dir>", "where pulled models go (default <data_dir>/models)")
      .option("--catalogue <dir>", "a catalogue folder of *.json entries (default the built-in one)");

  shared(cmd.command("list"))
    .description("catalogue entries with kind, size and whether they are in the models dir")
    .option("--json", "print JSON")
    .action((opts: { json?: boolean }, c: Command) => {
      try {
        const { config, modelsDir, entries } = setup(c);
        const rows = entries.map((e) => statusOf(e, modelsDir, config));
        emit(opts.json, rows, (r) => listHuman(r, modelsDir));
      } catch (e) {
        failClean(e);
      }
    });

  shared(cmd.command("pull <id>"))
    .description(
      "download a model's files into <models dir>/<id>/ (resumable, size and SHA-256 checked) and print its [[models]] block; " +
        "<id> is a catalogue id or hf:OWNER/REPO[@REVISION]:QUANT | hf:OWNER/REPO[@REVISION]/FILE.gguf (HF_ENDPOINT, HF_TOKEN honoured)",
    )
    .option("--allow-unverified", "also take files the catalogue records no checksum for")
    .option("--verify", "re-hash files already present instead of trusting their size")
    .option("--json", "print the result as JSON instead of the config block")
    .action(async (id: string, opts: { allowUnverified?: boolean; verify?: boolean; json?: boolean }, c: Command) => {
      const controller = new AbortController();
      const onSigint = () => controller.abort(new UsageError("interrupted; the partial download is kept: run the same command again to resume"));
      process.once("SIGINT", onSigint);
      const progress = progressPrinter(process.stderr);
      try {
        const { modelsDir, entries } = setup(c);
        if (isHfRef(id)) return await pullHf(id, modelsDir, { ...opts, signal: controller.signal, onProgress: progress.onProgress }, () => progress.finish());
        const entry = entries.find((e) => e.id === id);
        if (!entry) throw new UsageError(`no model "${id}" in the catalogue (known: ${entries.map((e) => e.id).join(", ")})`);
        if (entry.source === "generated") throw new UsageError(`"${id}" is generated, not downloaded: \`appliance serve --demo\` writes it into <data_dir>/demo-models`);
        if (entry.source === "manual") throw new UsageError(`"${id}" has no verifiable download: ${entry.instructions}`);
        const hub = new HfHub();
        const download = entry.source === "hf" ? await resolveHubEntry(entry, hub) : (entry as DownloadEntry);
        process.stderr.write(`pulling ${id} (${formatBytes(totalBytes(download))}) into ${join(modelsDir, modelFolder(download))}\n`);
        const result = await pullModel(download, {
          modelsDir,
          allowUnverified: opts.allowUnverified,
          verify: opts.verify,
          signal: controller.signal,
          onProgress: progress.onProgress,
          ...(entry.source === "hf" ? { fetch: hub.fetch } : {}),
        });
        progress.finish();
        const manifest = manifestFor(download);
        emit(opts.json, { ...result, models_dir: modelsDir, manifest }, () => configSnippet(manifest, modelsDir));
      } catch (e) {
        progress.finish();
        failClean(controller.signal.aborted ? controller.signal.reason : e);
      } finally {
        process.off("SIGINT", onSigint);
      }
    });

  shared(cmd.command("add <id>"))
    .description(
      "write the [[models]] entry of a pulled model (<models dir>/<id>/: a catalogue id, or the id an hf: pull printed) into the config file, " +
        "made from its files (kind, files, context); a running server picks it up on SIGHUP",
    )
    .option("--force", "replace the model's entry when the config already has one")
    .option("--json", "print the result as JSON")
    .action(async (id: string, opts: { force?: boolean; json?: boolean }, c: Command) => {
      try {
        await addModel(c, id, opts);
      } catch (e) {
        failClean(e);
      }
    });

  return cmd;
}

/** The folder id of a pulled model: the id itself, or what an hf: reference's pull named its folder. */
function folderIdOf(id: string): string {
  if (!isHfRef(id)) return id;
  const ref = parseHfRef(id);
  if (ref.quant !== undefined) return hfModelId(ref, ref.quant.toUpperCase());
  if (ref.path?.toLowerCase().endsWith(".gguf")) return hfModelId(ref, quantOf(ref.path), ref.path);
  throw new AddError(`${id}: name the model by the id its pull printed (the folder under the models dir)`);
}

/** The config file `add` writes: the one the CLI reads, else the default path (created). */
async function addModel(c: Command, idArg: string, opts: { force?: boolean; json?: boolean }): Promise<void> {
  const g = globals(c);
  const o = c.optsWithGlobals() as ModelsOptions;
  const target = configTarget(g.config);
  // No file yet: the built-in defaults (an empty file) with the environment's and flags' data dir.
  const config = targetConfig(target, g.dataDir);
  const modelsDir = resolve(o.modelsDir ?? join(config.server.data_dir, "models"));
  const entries = catalogue(o.catalogue ? resolve(o.catalogue) : undefined);
  const id = folderIdOf(idArg);
  const entry = entries.find((e) => e.id === id && e.source !== "generated");
  const dir = join(modelsDir, entry ? modelFolder(entry) : id.replace(/[/:]/g, "_"));
  const replacing = config.models.some((m) => m.id === id);
  if (replacing && !opts.force) throw new AddError(`${target.file}: model "${id}" is already in it (--force replaces its entry)`);
  // A new file sets models_dir to the models dir: its paths are short and stay right if it moves.
  const text = target.exists ? readFileSync(target.file, "utf8") : `# appliance config, written by \`appliance models add\`\nmodels_dir = ${JSON.stringify(modelsDir)}\n`;
  const manifest = await manifestForFolder({ id, dir, modelsDir: target.exists ? config.models_dir : modelsDir, entry });
  const out = withModelBlock(text, manifest, { replace: opts.force, file: target.file });
  // The edited file must load as the server will load it, files included, before it replaces the old one.
  replaceConfigFile(target, out, g.dataDir, (check) => checkModelFiles(check.models.filter((m) => m.id === id), check.models_dir));
  const pid = runningServerPid(config.server.data_dir);
  const reload = pid ? `kill -HUP ${pid}` : "kill -HUP <server pid>";
  emit(opts.json, { file: target.file, created: !target.exists, replaced: replacing, manifest, server_pid: pid }, () =>
    [
      `${!target.exists ? "created" : replacing ? "replaced in" : "added to"} ${target.file}:`,
      "",
      manifestToml(manifest),
      "",
      `A running server picks it up on SIGHUP (${reload}), or at its next start.`,
    ].join("\n"),
  );
}
