import { SQL } from "bun";
import { alive, freePort } from "./ports";
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

// A PostgreSQL cluster of the test run's own (test/setup-postgres.sh installs the server): initdb
// into a temp dir, a free port on 127.0.0.1, fsync off, started on first use and stopped by its
// PID when the run ends (test/setup.ts's afterAll: Bun's test runner emits no "exit" event), its
// files removed. A run that was killed leaves its cluster behind: the next run stops it (the dir
// names the run's process, and that process is gone) and removes it. Each caller gets a database
// of its own in it (`freshDatabase`). As root, the cluster runs as the `postgres` user (PostgreSQL
// refuses to run as root).

export interface Cluster {
  port: number;
  dir: string;
  pid: number;
  /** The URL of database `name` in this cluster. */
  url(name: string): string;
}

let cluster: Promise<Cluster> | null = null;
let databases = 0;

function binDir(): string {
  if (process.env.APPLIANCE_PG_BIN) return process.env.APPLIANCE_PG_BIN;
  const versions = existsSync("/usr/lib/postgresql") ? readdirSync("/usr/lib/postgresql").sort((a, b) => Number(a) - Number(b)) : [];
  const dir = versions.map((v) => `/usr/lib/postgresql/${v}/bin`).reverse().find((d) => existsSync(join(d, "initdb")));
  if (!dir) throw new Error("PostgreSQL's server binaries are missing: run test/setup-postgres.sh (part of the README's test command)");
  return dir;
}

const asRoot = process.getuid?.() === 0;
/** A command as the cluster's owner: `postgres` when the tests run as root. */
const owned = (args: string[]) => (asRoot ? ["runuser", "-u", "postgres", "--", ...args] : args);

function run(args: string[]): void {
  const r = Bun.spawnSync(owned(args), { stdout: "pipe", stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`${args.join(" ")} failed (${r.exitCode}): ${r.stderr.toString()}${r.stdout.toString()}`);
}

const PREFIX = "appliance-pg-";

/** Stops a cluster by its postmaster's PID (immediate shutdown), and removes its files. */
function stopCluster(dir: string): void {
  const pidFile = join(dir, "data", "postmaster.pid");
  const pid = existsSync(pidFile) ? Number(readFileSync(pidFile, "utf8").split("\n")[0]) : 0;
  if (pid > 0 && alive(pid)) {
    try {
      process.kill(pid, "SIGQUIT");
    } catch {}
    for (let i = 0; i < 100 && alive(pid); i++) Bun.sleepSync(20);
  }
  rmSync(dir, { recursive: true, force: true });
}

/** Clusters of earlier runs whose process is gone (killed before it could stop them). */
function sweepLeftovers(): void {
  for (const name of readdirSync(tmpdir())) {
    if (!name.startsWith(PREFIX)) continue;
    const dir = join(tmpdir(), name);
    const owner = existsSync(join(dir, "owner")) ? Number(readFileSync(join(dir, "owner"), "utf8")) : 0;
    if (owner > 0 && alive(owner)) continue;
    try {
      stopCluster(dir);
    } catch {}
  }
}

async function start(): Promise<Cluster> {
  const bin = binDir();
  sweepLeftovers();
  const dir = mkdtempSync(join(tmpdir(), PREFIX));
  writeFileSync(join(dir, "owner"), String(process.pid));
  if (asRoot) {
    const { uid, gid } = { uid: Number(Bun.spawnSync(["id", "-u", "postgres"]).stdout.toString()), gid: Number(Bun.spawnSync(["id", "-g", "postgres"]).stdout.toString()) };
    chownSync(dir, uid, gid);
  }
  const data = join(dir, "data");
  run([join(bin, "initdb"), "-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"]);
  const port = await freePort();
  const opts = `-c listen_addresses=127.0.0.1 -p ${port} -c unix_socket_directories=${dir} -c fsync=off -c full_page_writes=off -c max_connections=200`;
  run([join(bin, "pg_ctl"), "-D", data, "-o", opts, "-l", join(dir, "log"), "-w", "-t", "60", "start"]);
  const pid = Number(readFileSync(join(data, "postmaster.pid"), "utf8").split("\n")[0]);
  process.once("exit", () => stopCluster(dir)); // scripts (bench); the test runner calls stopPostgresCluster
  return { port, dir, pid, url: (name) => `postgres://postgres@127.0.0.1:${port}/${name}` };
}

/** Stops the run's cluster, if one was started (test/setup.ts, after the last test). */
export async function stopPostgresCluster(): Promise<void> {
  if (!cluster) return;
  const c = await cluster.catch(() => null);
  cluster = null;
  if (c) stopCluster(c.dir);
}

/** The run's cluster, started on first use. */
export function postgresCluster(): Promise<Cluster> {
  return (cluster ??= start());
}

/** A new, empty database in the run's cluster; its URL. */
export async function freshDatabase(prefix = "t"): Promise<string> {
  const c = await postgresCluster();
  const name = `${prefix}_${process.pid}_${++databases}`;
  const admin = new SQL({ url: c.url("postgres"), max: 1 });
  try {
    await admin.unsafe(`CREATE DATABASE ${name}`);
  } finally {
    await admin.close();
  }
  return c.url(name);
}

/** The secret of the tests' clusters (at least 32 characters, as a node requires). */
export const CLUSTER_SECRET = "test-cluster-secret-0123456789abcdef";

/** The environment of an appliance that is a node of the test cluster on `url`: its store, how the others reach it, the shared secret. */
export function nodeEnv(url: string): Record<string, string> {
  return { APPLIANCE_STORE_URL: url, APPLIANCE_ADVERTISE_URL: "http://127.0.0.1:{port}", APPLIANCE_CLUSTER_SECRET: CLUSTER_SECRET };
}
