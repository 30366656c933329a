import { Command } from "commander";
import { loadConfig } from "../../src/lib/config";
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

interface PsOptions {
  json?: boolean;
}

/** A control request to the server of the configured data dir; a clear error when none runs. */
async function control<T>(c: Command, method: "GET" | "POST", path: string): Promise<T> {
  const g = globals(c);
  const { config } = loadConfig({ file: g.config, flags: { dataDir: g.dataDir } });
  const dataDir = config.server.data_dir;
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

const UNLOADED: Record<UnloadResult, string> = {
  unloaded: "unloaded",
  when_idle: "requests hold it: it unloads when they end",
  not_loaded: "was not loaded",
};

export function psCommand(): Command {
  const run = (fn: () => Promise<void>) => fn().catch((e: unknown) => fail(e));
  const cmd = new Command("ps")
    .description("the running server's models: loaded or not, device, memory, idle time, requests in flight (load|unload ID to change that)")
    .option("--json", "print the list as JSON")
    .action((opts: PsOptions, c: Command) =>
      run(async () => {
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
