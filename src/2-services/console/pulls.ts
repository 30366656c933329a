import { readFileSync } from "node:fs";
import { ApiError } from "../../lib/errors";
import { systemClock, unixSeconds, type Clock } from "../../lib/clock";
import type { Config } from "../../lib/config";
import { newId } from "../../lib/ids";
import type { Logger } from "../../lib/log";
import type { ModelKind, ModelManifest } from "../../lib/manifest";
import { checkModelFiles, type Registry } from "../../3-engines/registry";
import type { MemoryPlanner } from "../../3-engines/residency";
import type { DeviceInfo, Room } from "../../3-engines/planner/types";

// The console's model pulls (issue 48): `appliance models pull` and `models add` for an admin in a
// browser. A pull is a job of this process: its source (a catalogue id or hf:OWNER/REPO[:QUANT]) is
// resolved when it is asked for (so a wrong reference is refused at once), then the one downloader
// (src/ops/pull/pull.ts: .part files, Range resumes, sizes and hashes checked) runs it in the
// background while the page polls its progress. One pull per model at a time; a cancel aborts it
// and keeps its .part files, so pulling the same source again resumes them. Finished jobs stay
// listed for a while. Adding a pulled model writes its [[models]] block into the config file the
// server was started from (as `models add`: made from the files' own metadata, the file checked
// before it replaces the old one) and reloads it as SIGHUP does: the model is served at once.
// The pull and add themselves are ops (src/ops/pull/console.ts), handed in by the assembly
// (services.ts): nothing on the request path imports ops/.

export type PullState = "queued" | "running" | "done" | "failed" | "cancelled";
type FileState = "waiting" | "checking" | "downloading" | "done" | "present";

/** What adding a model needs of the config file; `appliance serve` gives it (cli/commands/serve.ts). */
export interface ConfigFileAccess {
  /** The file the server reads its config from (or would create: the default path). */
  target(): { file: string; exists: boolean };
  /** The config that file holds now (the built-in defaults when it does not exist yet). */
  read(target: { file: string; exists: boolean }): Config;
  /** Replaces the file with `text` once the text loads as a config and passes `check`; else leaves it. */
  write(target: { file: string; exists: boolean }, text: string, check: (config: Config) => void): void;
  /** Applies the file to the running server, as SIGHUP does. */
  reload(): { models: { added: string[]; removed: string[]; replaced: string[] } };
}

/** One step of a download, as src/ops/pull/pull.ts reports it. */
export interface PullStep {
  fileIndex: number;
  phase: "start" | "download" | "hash" | "skip" | "done" | "retry";
  bytesDone: number;
  bytesTotal: number | null;
  /** Bytes per second over this file's run. */
  rate: number;
  message?: string;
}

/** A source resolved to its download (src/ops/pull/console.ts). */
export interface ResolvedPull {
  model: string;
  name: string;
  kind: ModelKind;
  files: { role: string; path: string; bytes: number | null }[];
  /** The hub commit it is pinned to, when it comes from a hub. */
  commit: string | null;
  /** The model's folder under the models dir. */
  dir: string;
  /** Downloads what is missing into the folder, each file checked; rejects with why (or the signal's reason). */
  run(o: { signal: AbortSignal; onProgress: (p: PullStep) => void }): Promise<void>;
  /**
   * The config `text` (null: no file yet) with the model's [[models]] block added, or put in place
   * of its block (`replace`), made from its files; paths relative to `modelsDir` (the config's
   * models_dir). A folder that makes no model is an ApiError (409).
   */
  addTo(o: { text: string | null; file: string; modelsDir: string; replace: boolean }): Promise<{ text: string; manifest: ModelManifest }>;
}

export interface CatalogueRow {
  id: string;
  name: string;
  kind: ModelKind;
  description: string;
  source: "download" | "hf" | "generated" | "manual";
  /** The files' total size where every one is recorded. */
  bytes: number | null;
  /** A verified download the console may pull (not a demo model, not one without checksums). */
  pullable: boolean;
  /** Its files in the models dir: all, some (or a .part), none; null when not pullable. */
  status: "present" | "partial" | "missing" | null;
}

/** The catalogue and the pulling itself: src/ops/pull/console.ts. */
export interface PullTools {
  modelsDir: string;
  catalogue(): CatalogueRow[];
  /** The download `source` names; an ApiError saying what is wrong with it (400), or that the hub is out of reach (502). */
  resolve(source: string): Promise<ResolvedPull>;
}

export interface PullJobsOptions {
  tools: PullTools;
  registry: Pick<Registry, "list" | "resolve" | "file" | "status">;
  planner: MemoryPlanner;
  clock?: Clock;
  logger?: Logger;
  /** Downloads at once; more wait queued. Default 2. */
  maxRunning?: number;
  /** How long a finished pull stays listed; default an hour. */
  keepFinishedMs?: number;
}

interface FileProgress {
  role: string;
  path: string;
  bytes: number | null;
  done: number;
  state: FileState;
}

interface Job {
  id: string;
  source: string;
  pull: ResolvedPull;
  state: PullState;
  files: FileProgress[];
  current: number | null;
  resumed: number;
  message: string | null;
  error: string | null;
  created: number;
  started: number | null;
  finished: number | null;
  controller: AbortController;
  /** Bytes downloaded by this job (not counting what a .part already held), with when: the rate. */
  downloaded: number;
  samples: { t: number; n: number }[];
  /** The downloader's own rate for the current file: used until the window has a few samples. */
  fileRate: number;
  added: boolean;
  /** Settles once the job has ended (run's promise; resolved at once for one cancelled while queued). */
  ended: Promise<void>;
}

const RATE_WINDOW_MS = 5000;
const MAX_SOURCE = 300;

export type PullJobs = ReturnType<typeof createPullJobs>;

export function createPullJobs(o: PullJobsOptions) {
  const clock = o.clock ?? systemClock;
  const maxRunning = o.maxRunning ?? 2;
  const keepMs = o.keepFinishedMs ?? 3_600_000;
  const jobs = new Map<string, Job>();
  let configFile: ConfigFileAccess | null = null;

  const active = (j: Job) => j.state === "queued" || j.state === "running";
  const served = (id: string) => o.registry.list().some((m) => m.id === id);

  function prune(): void {
    const cutoff = clock.now() - keepMs;
    for (const [id, j] of jobs) if (j.finished !== null && j.finished < cutoff) jobs.delete(id);
    // A burst of pulls keeps the 50 newest finished ones.
    const finished = [...jobs.values()].filter((j) => j.finished !== null);
    for (const j of finished.slice(0, Math.max(0, finished.length - 50))) jobs.delete(j.id);
  }

  function rateOf(j: Job, now = performance.now()): number {
    if (j.state !== "running") return 0;
    const base = j.samples[0];
    const last = j.samples.at(-1);
    if (!base || !last) return 0;
    const span = now - base.t;
    if (span < 500) return j.fileRate;
    return Math.max(0, ((last.n - base.n) * 1000) / span);
  }

  function view(j: Job) {
    const bytesDone = j.files.reduce((a, f) => a + f.done, 0);
    const bytesTotal = j.files.every((f) => f.bytes !== null) ? j.files.reduce((a, f) => a + f.bytes!, 0) : null;
    const rate = rateOf(j);
    const current = j.current === null ? null : j.files[j.current]!;
    return {
      id: j.id,
      source: j.source,
      model: j.pull.model,
      name: j.pull.name,
      kind: j.pull.kind,
      commit: j.pull.commit,
      state: j.state,
      /** The file being downloaded or checked now. */
      file: j.state === "running" && current ? current.path : null,
      files: j.files.map((f) => ({ role: f.role, path: f.path, bytes: f.bytes, bytes_done: f.done, state: f.state })),
      bytes_done: bytesDone,
      bytes_total: bytesTotal,
      /** Bytes per second over the last few seconds. */
      rate: Math.round(rate),
      eta_s: rate > 0 && bytesTotal !== null ? Math.ceil((bytesTotal - bytesDone) / rate) : null,
      /** Bytes a .part held when this pull started: resumed, not downloaded again. */
      resumed_bytes: j.resumed,
      message: j.message,
      error: j.error,
      created_at: unixSeconds(j.created),
      started_at: unixSeconds(j.started),
      finished_at: unixSeconds(j.finished),
      /** Every file is in place with its size and checksum verified. */
      verified: j.state === "done",
      added: j.added,
      /** The server serves a model of this id now. */
      configured: served(j.pull.model),
    };
  }

  function progress(j: Job, p: PullStep): void {
    const f = j.files[p.fileIndex];
    if (!f) return;
    j.current = p.fileIndex;
    if (f.bytes === null && p.bytesTotal !== null) f.bytes = p.bytesTotal;
    const advance = (to: number) => {
      if (to > f.done) j.downloaded += to - f.done;
      f.done = to;
    };
    switch (p.phase) {
      case "start":
        f.state = "downloading";
        f.done = p.bytesDone;
        j.resumed += p.bytesDone;
        j.message = p.bytesDone > 0 ? `resuming ${f.path} at byte ${p.bytesDone}` : null;
        break;
      case "hash":
        f.state = "checking";
        break;
      case "download":
        f.state = "downloading";
        j.fileRate = p.rate;
        j.message = null;
        advance(p.bytesDone);
        break;
      case "retry":
        j.message = `${f.path}: ${p.message ?? "retrying"}`;
        f.done = p.bytesDone;
        break;
      case "skip":
        f.state = "present";
        f.done = p.bytesDone;
        break;
      case "done":
        f.state = "done";
        advance(p.bytesDone);
        j.message = null;
        break;
    }
    const now = performance.now();
    j.samples.push({ t: now, n: j.downloaded });
    // keep one sample from before the window as its base
    while (j.samples.length > 2 && j.samples[1]!.t < now - RATE_WINDOW_MS) j.samples.shift();
  }

  async function run(j: Job): Promise<void> {
    j.state = "running";
    j.started = clock.now();
    try {
      await j.pull.run({ signal: j.controller.signal, onProgress: (p) => progress(j, p) });
      j.state = "done";
      j.message = null;
      o.logger?.info("model pulled", { pull: j.id, source: j.source, model: j.pull.model, dir: j.pull.dir });
    } catch (e) {
      if (j.controller.signal.aborted) {
        j.state = "cancelled";
        j.message = "cancelled; what was downloaded is kept: pull it again to resume";
      } else {
        j.state = "failed";
        j.message = null;
        j.error = e instanceof Error ? e.message : String(e);
        o.logger?.warn("model pull failed", { pull: j.id, source: j.source, model: j.pull.model, error: j.error });
      }
    } finally {
      j.finished = clock.now();
      j.current = null;
      j.samples = [];
      pump();
    }
  }

  function pump(): void {
    let running = [...jobs.values()].filter((j) => j.state === "running").length;
    for (const j of jobs.values()) {
      if (running >= maxRunning) break;
      if (j.state !== "queued") continue;
      running++;
      j.ended = run(j);
    }
  }

  function job(id: string): Job {
    const j = jobs.get(id);
    if (!j) throw new ApiError("not_found", `No such pull: ${id}`, { param: "id" });
    return j;
  }

  return {
    /** The catalogue with each entry's size, whether its files are in the models dir, whether it is served or being pulled. */
    catalogue() {
      return {
        models_dir: o.tools.modelsDir,
        data: o.tools.catalogue().map((e) => ({ ...e, configured: served(e.id), pulling: [...jobs.values()].some((j) => active(j) && j.pull.model === e.id) })),
      };
    },

    list() {
      prune();
      return { data: [...jobs.values()].reverse().map(view) };
    },

    get: (id: string) => view(job(id)),

    /** Starts a pull of `body.source`; a second one of a model being pulled is a 409. */
    async start(body: { source?: unknown }) {
      const raw = body.source;
      if (typeof raw !== "string" || !raw.trim()) throw new ApiError("invalid_request", "source: a catalogue id or hf:OWNER/REPO[:QUANT] is required", { param: "source" });
      const source = raw.trim();
      if (source.length > MAX_SOURCE || /[\u0000-\u001f\u007f\s]/.test(source))
        throw new ApiError("invalid_request", `source: a catalogue id or hf:OWNER/REPO[:QUANT], without spaces, up to ${MAX_SOURCE} characters`, { param: "source" });
      const pull = await o.tools.resolve(source);
      const id = pull.model;
      const other = [...jobs.values()].find((j) => active(j) && j.pull.model === id);
      if (other) throw new ApiError("conflict", `model "${id}" is being pulled already (${other.id}); cancel that pull first`);
      const j: Job = {
        id: newId("pull_", 16),
        source,
        pull,
        state: "queued",
        files: pull.files.map((f) => ({ ...f, done: 0, state: "waiting" })),
        current: null,
        resumed: 0,
        message: null,
        error: null,
        created: clock.now(),
        started: null,
        finished: null,
        controller: new AbortController(),
        downloaded: 0,
        samples: [],
        fileRate: 0,
        added: false,
        ended: Promise.resolve(),
      };
      prune();
      jobs.set(j.id, j);
      o.logger?.info("model pull started", { pull: j.id, source, model: id });
      pump();
      return view(j);
    },

    /** Stops a queued or running pull (answered once it has stopped); its .part files stay for the next pull of the model. */
    async cancel(id: string) {
      const j = job(id);
      if (!active(j)) throw new ApiError("conflict", `pull ${id} has ended (${j.state}); nothing to cancel`);
      if (j.state === "queued") {
        j.state = "cancelled";
        j.finished = clock.now();
        j.message = "cancelled before it started";
      }
      j.controller.abort(new Error("cancelled"));
      await Promise.race([j.ended, Bun.sleep(5000)]);
      return view(j);
    },

    /**
     * Adds a finished pull's model to the config file, as `appliance models add` does, and reloads
     * it; `replace` replaces an entry of the same id.
     */
    async add(id: string, body: { replace?: unknown }) {
      const j = job(id);
      if (body.replace !== undefined && typeof body.replace !== "boolean") throw new ApiError("invalid_request", "replace must be true or false", { param: "replace" });
      if (j.state !== "done") throw new ApiError("conflict", `pull ${id} has not finished (${j.state}): only a finished pull's model can be added`);
      if (!configFile)
        throw new ApiError("conflict", `this server was not started by \`appliance serve\`, so it has no config file to write: run \`appliance models add ${j.pull.model}\` and reload it`);
      const model = j.pull.model;
      const replace = body.replace === true;
      const target = configFile.target();
      let manifest: ModelManifest;
      let replaced = false;
      try {
        const config = configFile.read(target);
        replaced = config.models.some((m) => m.id === model);
        if (replaced && !replace) throw new ApiError("conflict", `${target.file}: model "${model}" is in it already (replace: true replaces its entry)`);
        const edit = await j.pull.addTo({ text: target.exists ? readFileSync(target.file, "utf8") : null, file: target.file, modelsDir: config.models_dir, replace });
        manifest = edit.manifest;
        // The edited file must load as the server will load it, files included, before it replaces the old one.
        configFile.write(target, edit.text, (check) => void checkModelFiles(check.models.filter((m) => m.id === model), check.models_dir));
      } catch (e) {
        if (e instanceof ApiError) throw e;
        throw new ApiError("conflict", `${target.file} was left as it was: ${(e as Error).message}`);
      }
      let reload;
      try {
        reload = configFile.reload().models;
      } catch (e) {
        throw new ApiError("conflict", `added "${model}" to ${target.file}, but the server could not reload it: ${(e as Error).message}`);
      }
      j.added = true;
      o.logger?.info("model added to the config", { pull: j.id, model, file: target.file });
      return { pull: view(j), file: target.file, created: !target.exists, replaced, manifest, reload, served: served(model) };
    },

    /** The memory plan of a served model: where it would load now, with how much memory. */
    plan: (id: string) => planOf(o, id),

    /** The config file the server reads (cli/commands/serve.ts): what `add` writes and reloads. */
    useConfigFile(access: ConfigFileAccess): void {
      configFile = access;
    },

  };
}

// ---- the memory plan ----

/**
 * Where `id` would be placed if it were loaded now, as the residency manager decides
 * (src/3-engines/residency.ts): beside the models loaded now ("together"), or only once the idle,
 * unpinned ones are unloaded ("alone", naming them), or not at all ("refused", with the planner's
 * reason). A loaded model answers with its placement. Memory held by loaded models is read from
 * their status (what `appliance ps` shows); a rented GPU is not known here.
 */
async function planOf(o: Pick<PullJobsOptions, "registry" | "planner">, id: string) {
  const m = o.registry.resolve(id);
  const status = o.registry.status();
  const self = status.find((s) => s.id === id);
  if (self && self.state === "loaded")
    return { id, kind: m.kind, state: self.state, fits: "loaded" as const, device: self.device, gpu_layers: self.gpu_layers, context_size: self.context_size, slots: self.slots, memory_mb: self.memory_mb };
  const devices = await o.planner.devices();
  const base = { id, kind: m.kind, state: self?.state ?? "unloaded", devices: devices.map(deviceView) };
  let profile;
  try {
    profile = await o.planner.profile(m, (role) => o.registry.file(m, role));
  } catch (e) {
    return { ...base, fits: "unread" as const, reason: `its files could not be read: ${(e as Error).message}` };
  }
  const wants = o.planner.wants(m, devices);
  const others = status.filter((s) => s.id !== id && s.state === "loaded" && s.memory_mb);
  const idle = others.filter((s) => !s.pinned && s.in_flight === 0);
  const gpuOf = (s: (typeof status)[number]) => (s.device && s.device !== "cpu" ? s.device : devices.find((d) => d.kind !== "cpu")?.id);
  const rooms = (back: typeof others): [Room[], Room] => {
    const held = new Map<string, number>();
    const freed = new Map<string, number>();
    for (const s of others) {
      const into = back.includes(s) ? freed : held;
      const gpu = gpuOf(s);
      if (gpu && s.memory_mb!.gpu) into.set(gpu, (into.get(gpu) ?? 0) + s.memory_mb!.gpu);
      into.set("cpu", (into.get("cpu") ?? 0) + s.memory_mb!.cpu);
    }
    const room = (d: DeviceInfo): Room => ({ device: d, availableMb: Math.max(0, Math.min(d.budgetMb - (held.get(d.id) ?? 0), d.freeMb + (freed.get(d.id) ?? 0))) });
    return [devices.filter((d) => d.kind !== "cpu").map(room), room(devices.find((d) => d.kind === "cpu")!)];
  };
  const layers = m.kind === "chat" ? profile.layers : null;
  const placed = (fit: Extract<Awaited<ReturnType<MemoryPlanner["fit"]>>, { ok: true }>) => ({
    device: fit.device,
    gpu_layers: fit.settings.gpuLayers,
    layers,
    context_size: fit.settings.contextSize,
    slots: fit.settings.slots,
    memory_mb: { gpu: fit.footprint.gpuMb, cpu: fit.footprint.cpuMb },
    parts_mb: { weights: fit.footprint.parts.weightsMb, cache: fit.footprint.parts.cacheMb, compute: fit.footprint.parts.computeMb, projector: fit.footprint.parts.projectorMb },
  });
  const together = await o.planner.fit(profile, wants, ...rooms([]), `"${id}"`);
  if (together.ok) return { ...base, fits: "together" as const, ...placed(together), unloads: [] as string[] };
  const alone = await o.planner.fit(profile, wants, ...rooms(idle), `"${id}"`);
  if (alone.ok) return { ...base, fits: "alone" as const, ...placed(alone), unloads: idle.map((s) => s.id) };
  return { ...base, fits: "refused" as const, reason: alone.reason, missing_mb: alone.missingMb };
}

function deviceView(d: DeviceInfo) {
  return { id: d.id, kind: d.kind, name: d.name, total_mb: d.totalMb, free_mb: d.freeMb, budget_mb: d.budgetMb };
}
