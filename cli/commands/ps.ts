import { Command } from "commander";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { loadConfig, type Config } from "../../src/lib/config";
import { NODE_LEASE_MS } from "../../src/2-services/cluster/node";
import type { NodeRow } from "../../src/4-store/nodes";
import { NODE_ID_FILE } from "../../src/4-store/node-id";
import { nodeStoreOf, openPostgresStore } from "../../src/4-store/store";
import type { UnloadResult } from "../../src/2-services/residency/service";
import { controlSocketPath } from "../../src/1-api/control-socket";
import type { ResidencyStatus } from "../../src/3-engines/residency";
import { runningServerPid } from "../../src/4-store/lock";
import { globals } from "../context";
import { emit, fail, table, UsageError } from "../output";

// `appliance ps [load|unload ID]`: the running server's models — loaded or not, where, how much
// memory, idle for how long, requests in flight — and an operator's load or unload, through the
// server's control socket (<data_dir>/control.sock, src/1-api/control-socket.ts): the same functions as
// the admin API, with no key (the socket is the server user's alone). Load and unload live here
// rather than under `appliance models`, which works on the catalogue and the config file offline:
// everything under `ps` needs the running server, as `ollama ps` and `docker ps` do.
// On a PostgreSQL store (a cluster, issue 45) `ps` lists every live node's models with a NODE
// column: this node's live from its control socket, the others' as of their last heartbeat (read
// from the store, as `appliance nodes` does: loaded or not, in flight, slots). Load and unload
// stay this node's own.

interface PsOptions {
  json?: boolean;
}

const configOf = (c: Command): Config => {
  const g = globals(c);
  return loadConfig({ file: g.config, flags: { dataDir: g.dataDir } }).config;
};

/** A control request to the server of the configured data dir; a clear error when none runs. */
async function control<T>(c: Command, method: "GET" | "POST", path: string): Promise<T> {
  const dataDir = configOf(c).server.data_dir;
  const unix = controlSocketPath(dataDir);
  let res: Response;
  try {
    res = await fetch(`http://localhost${path}`, { method, unix });
  } catch (e) {
    const pid = runningServerPid(dataDir);
    throw new UsageError(
      pid
        ? `the server (pid ${pid}) on the data dir ${dataDir} does not answer on its control socket ${unix}: ${(e as Error).message}`
        : `no server is running on the data dir ${dataDir} (start one with \`appliance serve\`)`,
    );
  }
  const body = (await res.json().catch(() => null)) as { error?: { message?: string } } | null;
  if (!res.ok) throw new UsageError(body?.error?.message ?? `the server answered HTTP ${res.status}`);
  return body as T;
}

/** 75 → "1m15s", 300 → "5m", 7200 → "2h". */
export function duration(s: number): string {
  const parts: string[] = [];
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = Math.round(s % 60);
  if (h) parts.push(`${h}h`);
  if (m) parts.push(`${m}m`);
  if (sec || !parts.length) parts.push(`${sec}s`);
  return parts.join("");
}

const COLUMNS = ["model", "kind", "state", "device", "gpu layers", "context×slots", "memory (gpu/cpu mb)", "in flight", "idle", "keep alive"];

function row(s: ResidencyStatus): Record<string, string> {
  const dash = (v: number | string | null) => (v === null ? "-" : String(v));
  return {
    model: s.id,
    kind: s.kind,
    state: s.waiting > 0 ? `${s.state} (${s.waiting} waiting)` : s.state,
    device: dash(s.device),
    "gpu layers": dash(s.gpu_layers),
    "context×slots": s.context_size !== null && s.slots !== null ? `${s.context_size}×${s.slots}` : "-",
    "memory (gpu/cpu mb)": s.memory_mb ? `${s.memory_mb.gpu}/${s.memory_mb.cpu}` : "-",
    "in flight": String(s.in_flight),
    idle: s.idle_s === null ? "-" : duration(s.idle_s),
    "keep alive": s.pinned ? "pinned" : s.keep_alive_s < 0 ? "until room is needed" : duration(s.keep_alive_s),
  };
}

export function renderPs(models: ResidencyStatus[]): string {
  return table(models.map(row), COLUMNS);
}

/** One model on one node of a cluster: this node's with its live residency, another's as of its last beat. */
export type ClusterPsRow = { node: string; as_of: "live" } & ResidencyStatus;
export interface BeatPsRow {
  node: string;
  as_of: "heartbeat";
  /** Seconds since that node's last beat. */
  heartbeat_age_s: number;
  id: string;
  kind: string;
  state: "loaded" | "unloaded";
  max_context: number;
  in_flight: number;
  slots: number | null;
}

/**
 * The rows of `ps` on a cluster: this node's models live (when its server answers), then every
 * other live node's (gone ones, past the lease, serve nothing) in id order, as of their last beat.
 * `self`: this data dir's node id (null before its first start).
 */
export function clusterPs(self: string | null, local: ResidencyStatus[] | null, nodes: readonly NodeRow[]): (ClusterPsRow | BeatPsRow)[] {
  const rows: (ClusterPsRow | BeatPsRow)[] = local && self ? local.map((s) => ({ node: self, as_of: "live" as const, ...s })) : [];
  const others = nodes.filter((n) => n.ageMs <= NODE_LEASE_MS && !(local && n.id === self)).sort((a, b) => Number(b.id === self) - Number(a.id === self) || (a.id < b.id ? -1 : 1));
  for (const n of others)
    for (const m of n.models)
      rows.push({
        node: n.id,
        as_of: "heartbeat",
        heartbeat_age_s: Math.round(n.ageMs / 100) / 10,
        id: m.id,
        kind: m.kind,
        state: m.loaded ? "loaded" : "unloaded",
        max_context: m.max_context,
        in_flight: m.in_flight,
        slots: m.slots,
      });
  return rows;
}

/** The cluster's table: a NODE column first ("(draining)" after a draining node's id), then ps's own. */
export function renderClusterPs(rows: (ClusterPsRow | BeatPsRow)[], draining: ReadonlySet<string> = new Set()): string {
  const node = (id: string) => (draining.has(id) ? `${id} (draining)` : id);
  const lines = rows.map((r): Record<string, string> =>
    r.as_of === "live"
      ? { node: node(r.node), ...row(r) }
      : {
          node: node(r.node),
          model: r.id,
          kind: r.kind,
          state: r.state,
          device: "-",
          "gpu layers": "-",
          "context×slots": r.slots === null ? "-" : `-×${r.slots}`,
          "memory (gpu/cpu mb)": "-",
          "in flight": String(r.in_flight),
          idle: "-",
          "keep alive": "-",
        },
  );
  const note = rows.some((r) => r.as_of === "heartbeat") ? "\n(other nodes' rows as of their last heartbeat, every 3 s; `appliance nodes` lists the nodes)" : "";
  return table(lines, ["node", ...COLUMNS]) + note;
}

/** This data dir's node id, without making one (`serve` makes it at its first start on a PostgreSQL store). */
function ownNodeId(dataDir: string): string | null {
  const path = join(dataDir, NODE_ID_FILE);
  const id = existsSync(path) ? readFileSync(path, "utf8").trim() : "";
  return /^node_[0-9A-Za-z]{12}$/.test(id) ? id : null;
}

/** `ps` on a PostgreSQL store: every live node's models. No server on this data dir: the others' alone. */
async function psOfCluster(c: Command, config: Config, json: boolean | undefined): Promise<void> {
  const dataDir = config.server.data_dir;
  const local = runningServerPid(dataDir) ? (await control<{ data: ResidencyStatus[] }>(c, "GET", "/models")).data : null;
  const store = await openPostgresStore(config.store.url, { max: 1, migrate: false });
  try {
    const nodes = await nodeStoreOf(store)!.list();
    const rows = clusterPs(ownNodeId(dataDir), local, nodes);
    emit(json, rows, (r) => renderClusterPs(r, new Set(nodes.filter((n) => n.draining).map((n) => n.id))));
  } finally {
    await store.close();
  }
}

const UNLOADED: Record<UnloadResult, string> = {
  unloaded: "unloaded",
  when_idle: "requests hold it: it unloads when they end",
  not_loaded: "was not loaded",
};

export function psCommand(): Command {
  const run = (fn: () => Promise<void>) => fn().catch((e: unknown) => fail(e));
  const cmd = new Command("ps")
    .description(
      "the running server's models: loaded or not, device, memory, idle time, requests in flight (load|unload ID to change that); on a PostgreSQL store every live node's, with the node serving each",
    )
    .option("--json", "print the list as JSON")
    .action((opts: PsOptions, c: Command) =>
      run(async () => {
        const config = configOf(c);
        if (config.store.url) return psOfCluster(c, config, opts.json);
        const list = await control<{ data: ResidencyStatus[] }>(c, "GET", "/models");
        emit(opts.json, list.data, renderPs);
      }),
    );
  cmd
    .command("load")
    .description("load a model now, where the memory planner places it (idle models are unloaded to make room)")
    .argument("<id>", "model id")
    .option("--json", "print the model's status as JSON")
    .action((id: string, _o: PsOptions, c: Command) =>
      run(async () => {
        const status = await control<ResidencyStatus>(c, "POST", `/models/${encodeURIComponent(id)}/load`);
        emit((c.optsWithGlobals() as PsOptions).json, status, (s) => renderPs([s]));
      }),
    );
  cmd
    .command("unload")
    .description("unload a model now, or once the requests holding it end")
    .argument("<id>", "model id")
    .option("--json", "print {id, result} as JSON")
    .action((id: string, _o: PsOptions, c: Command) =>
      run(async () => {
        const r = await control<{ id: string; result: UnloadResult }>(c, "POST", `/models/${encodeURIComponent(id)}/unload`);
        emit((c.optsWithGlobals() as PsOptions).json, r, (x) => `${x.id}: ${UNLOADED[x.result]}`);
      }),
    );
  return cmd;
}
