import { spawn } from "node:child_process";
import { accessSync, closeSync, constants, openSync, readdirSync, readFileSync } from "node:fs";
import { LOG_FILE, tailOf } from "./log-tail";
import { freePort } from "../../../lib/net/free-port";
import { join } from "node:path";
import { proxyFlags } from "../access";
import type { LaunchHandle, LaunchIntent, Launcher, LaunchSpec, Liveness } from "./types";

// The `process` launcher: JupyterLab (or a configured command taking the same flags) as a child
// process bound to the rental's GPUs with CUDA_VISIBLE_DEVICES, on a free port, requiring the
// rental's token. It runs in its own process group, so stopping it stops what it started, and it
// outlives a restart of the appliance (which finds it again by pid and the rental id in its
// environment, or by that tag alone when the appliance died before it recorded the pid). Its
// output goes to `<workDir>/jupyter.log`. The token is passed as JUPYTER_TOKEN (Jupyter Server's
// IdentityProvider reads it from there): a command line is readable by every local user
// (/proc/<pid>/cmdline, `ps`), an environment only by the same user and root.

export interface ProcessLauncherOptions {
  /** The program and its first arguments; the launcher adds --port, --ip and the root dir (the token goes in JUPYTER_TOKEN). */
  command: string[];
  /** Address the notebook server listens on. */
  bind: string;
  /** Host or IP the owner connects to (the connection url). */
  publicHost: string;
  /** Where readiness is probed. */
  probeHost?: string;
  /** How long stop waits after SIGTERM before SIGKILL (default 5 s: Jupyter saves and shuts kernels down). */
  stopGraceMs?: number;
}

const ENV_TAG = "APPLIANCE_RENTAL_ID";

export function createProcessLauncher(o: ProcessLauncherOptions): Launcher {
  const probeHost = o.probeHost ?? "127.0.0.1";

  /**
   * Stops everything carrying the rental's tag: the server (`pid`, when known: its group first, so
   * Jupyter shuts its kernels down), its kernels, whatever they started — also when the server
   * itself already exited and left them behind. SIGTERM, then SIGKILL after the grace period.
   */
  async function stopTagged(pid: number | null, rentalId: string) {
    const left = () => [...new Set([...(pid !== null && ours(pid, rentalId) ? [pid] : []), ...tagged(rentalId)])];
    if (left().length === 0) return;
    if (pid !== null && ours(pid, rentalId)) signal(pid, "SIGTERM");
    for (const p of left()) signal(p, "SIGTERM", false);
    const grace = Date.now() + (o.stopGraceMs ?? 5000);
    while (Date.now() < grace && left().length > 0) await Bun.sleep(100);
    for (const p of left()) signal(p, "SIGKILL", false);
    for (let i = 0; i < 20 && left().length > 0; i++) await Bun.sleep(50);
  }

  return {
    name: "process",

    intent: (spec: LaunchSpec): LaunchIntent => ({ launcher: "process", data: { env: `${ENV_TAG}=${spec.rentalId}`, rentalId: spec.rentalId } }),

    async reclaim(intent: LaunchIntent): Promise<void> {
      const rentalId = intent.data.rentalId;
      if (typeof rentalId !== "string" || rentalId === "") throw new Error("process: the launch intent names no rental");
      await stopTagged(null, rentalId);
    },
    async start(spec: LaunchSpec): Promise<LaunchHandle> {
      const port = await freePort();
      // Proxy mode: loopback only, so the appliance's port is the one way in (src/1-api/rentals/proxy.ts).
      const bind = spec.basePath ? "127.0.0.1" : o.bind;
      const log = join(spec.workDir, LOG_FILE);
      const fd = openSync(log, "a");
      try {
        const [program, ...args] = o.command;
        const child = spawn(
          program!,
          [...args, `--ip=${bind}`, `--port=${port}`, "--no-browser", `--ServerApp.root_dir=${spec.workDir}`, "--ServerApp.port_retries=0", ...proxyFlags(spec.basePath)],
          {
            cwd: spec.workDir,
            detached: true, // its own process group: stop() signals the whole group
            stdio: ["ignore", fd, fd],
            env: { ...process.env, CUDA_VISIBLE_DEVICES: spec.gpus.join(","), JUPYTER_TOKEN: spec.token, [ENV_TAG]: spec.rentalId },
          },
        );
        const pid = await new Promise<number>((resolve, reject) => {
          child.once("error", (e) => reject(new Error(`cannot start ${program}: ${e.message}`)));
          child.once("spawn", () => resolve(child.pid!));
        });
        child.unref();
        await execed(pid, spec.rentalId);
        if (spec.basePath)
          return { launcher: "process", url: `http://127.0.0.1:${port}${spec.basePath}lab`, data: { pid, port, log, rentalId: spec.rentalId }, proxy: { upstream: `http://127.0.0.1:${port}`, basePath: spec.basePath } };
        return { launcher: "process", url: `http://${o.publicHost}:${port}/lab`, data: { pid, port, log, rentalId: spec.rentalId } };
      } finally {
        closeSync(fd);
      }
    },

    async probe(handle: LaunchHandle): Promise<Liveness> {
      const { pid, port, rentalId } = handle.data as { pid: number; port: number; rentalId: string };
      if (!ours(pid, rentalId)) return "dead";
      try {
        const res = await fetch(`http://${probeHost}:${port}${handle.proxy?.basePath ?? "/"}api`, { signal: AbortSignal.timeout(2000) });
        await res.arrayBuffer();
        return res.ok ? "ready" : "starting";
      } catch {
        return ours(pid, rentalId) ? "starting" : "dead";
      }
    },

    async stop(handle: LaunchHandle): Promise<void> {
      const { pid, rentalId } = handle.data as { pid: number; rentalId: string };
      await stopTagged(pid, rentalId);
    },

    async logs(handle: LaunchHandle, maxBytes: number): Promise<string> {
      return tailOf(handle.data.log as string, maxBytes);
    },

    async health(): Promise<string | null> {
      const program = o.command[0]!;
      const hint = "install JupyterLab (`pip install jupyterlab`) or set rentals.process.command";
      if (program.includes("/")) {
        try {
          accessSync(program, constants.X_OK);
          return null;
        } catch {
          return `${program} is not an executable file (${hint})`;
        }
      }
      return Bun.which(program) ? null : `\`${program}\` is not on the PATH (${hint})`;
    },
  };
}

/** The process group first (what the server started) unless `group` is false, then the process itself. */
function signal(pid: number, sig: NodeJS.Signals, group = true) {
  if (group) {
    try {
      process.kill(-pid, sig);
      return;
    } catch {}
  }
  try {
    process.kill(pid, sig);
  } catch {}
}

/** Live processes whose environment carries the rental's tag (empty where there is no /proc). */
function tagged(rentalId: string): number[] {
  const pids: number[] = [];
  let names: string[];
  try {
    names = readdirSync("/proc");
  } catch {
    return pids;
  }
  const tag = `${ENV_TAG}=${rentalId}`;
  for (const name of names) {
    if (name.charCodeAt(0) < 48 || name.charCodeAt(0) > 57) continue;
    try {
      if (/\) Z /.test(readFileSync(`/proc/${name}/stat`, "utf8"))) continue;
      if (readFileSync(`/proc/${name}/environ`, "utf8").split("\0").includes(tag)) pids.push(Number(name));
    } catch {}
  }
  return pids;
}

/**
 * Waits until the child runs the notebook command (its environment carries the tag), or exited.
 * "spawn" can come before the exec: until then /proc shows the appliance's own environment, and a
 * stop in that window found nothing of the rental's and left the server to start unstopped (seen
 * under load: a DELETE right after the POST). Bounded; without /proc there is nothing to wait for.
 */
async function execed(pid: number, rentalId: string, timeoutMs = 5000) {
  const tag = `${ENV_TAG}=${rentalId}`;
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    try {
      if (/\) Z /.test(readFileSync(`/proc/${pid}/stat`, "utf8"))) return; // exited before or after the exec
      if (readFileSync(`/proc/${pid}/environ`, "utf8").split("\0").includes(tag)) return;
    } catch {
      return; // gone, or no /proc
    }
    await Bun.sleep(2);
  }
}

/** Whether `pid` is alive and is this rental's process (a reused pid is not). */
function ours(pid: number, rentalId: string): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    if (/\) Z /.test(stat)) return false; // exited, not yet reaped
    return readFileSync(`/proc/${pid}/environ`, "utf8").split("\0").includes(`${ENV_TAG}=${rentalId}`);
  } catch {
    return true; // no /proc (not Linux): the pid check is all there is
  }
}
