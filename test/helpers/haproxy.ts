import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { alive, freePort } from "./ports";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Subprocess } from "bun";

// An HAProxy of a test's own in front of appliance nodes (issue 45: "HAProxy in front with a
// backend killed — only the requests in flight on it fail"). test/setup-postgres.sh installs
// Debian's `haproxy`; Debian's own service is stopped there and never used. Each call writes a
// config into a temp dir (one frontend on a free 127.0.0.1 port, one backend over the given URLs,
// health-checked with GET /health), runs `haproxy -db` (foreground, one process) and resolves once
// the frontend accepts connections. `stop()` ends it by its PID; test/setup.ts stops any a test
// file left running, and a run that was killed leaves a dir whose owner is gone: the next start
// stops its haproxy (by the PID it recorded, if that is still an haproxy) and removes it, as
// test/helpers/postgres.ts does with its cluster.

export interface HaproxyOptions {
  /** The nodes' base URLs (http://host:port), in server order: server i is named `n<i>`. */
  backends: string[];
  /** leastconn (default: a long stream counts against its node) or roundrobin. */
  balance?: "leastconn" | "roundrobin";
}

export interface ServerState {
  /** n0, n1, … in the order of `backends`. */
  name: string;
  /** HAProxy's status: UP, DOWN, "UP 1/2" while a check is changing it, MAINT, … */
  status: string;
}

export interface Haproxy {
  /** The frontend, http://127.0.0.1:<port>: what a client is pointed at. */
  url: string;
  port: number;
  pid: number;
  dir: string;
  /** Each server's status as HAProxy's health checks see it (the admin socket's `show stat`). */
  servers(): Promise<ServerState[]>;
  /** Resolves once server `name` has `status` (e.g. "DOWN" after its node is killed); throws after `timeoutMs`. */
  waitFor(name: string, status: string, timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

const PREFIX = "appliance-haproxy-";
const running = new Set<Haproxy>();

function binary(): string {
  if (process.env.APPLIANCE_HAPROXY_BIN) return process.env.APPLIANCE_HAPROXY_BIN;
  const found = Bun.which("haproxy") ?? ["/usr/sbin/haproxy", "/usr/local/sbin/haproxy"].find((p) => existsSync(p));
  if (!found) throw new Error("haproxy is missing: run test/setup-postgres.sh (it installs Debian's haproxy), or set APPLIANCE_HAPROXY_BIN");
  return found;
}

/** Whether `pid` is an haproxy (a recorded PID may have been reused by another process since). */
function isHaproxy(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("haproxy");
  } catch {
    return false;
  }
}

/** HAProxies of earlier runs whose test process is gone: stopped by PID, their dirs removed. */
function sweepLeftovers(): void {
  for (const name of readdirSync(tmpdir())) {
    if (!name.startsWith(PREFIX)) continue;
    const dir = join(tmpdir(), name);
    const read = (f: string) => (existsSync(join(dir, f)) ? Number(readFileSync(join(dir, f), "utf8")) : 0);
    const owner = read("owner");
    if (owner > 0 && alive(owner)) continue;
    const pid = read("pid");
    if (pid > 0 && alive(pid) && isHaproxy(pid)) process.kill(pid, "SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * The config. Why each setting:
 * - `option httpchk` + `http-check send meth GET uri /health ver HTTP/1.1 hdr Host …` +
 *   `http-check expect status 200`: a node that is fenced or draining answers /health 503, so
 *   HAProxy stops sending it new work as the appliance asks. HTTP/1.1 with a Host: HAProxy's
 *   default check is HTTP/1.0 without one, which Bun's server hands over as a bare path.
 * - `inter 500ms fall 2 rise 1`: a dead node is out after about a second, a returning one back
 *   after its first good check.
 * - `retries 2` + `option redispatch 1`: a refused connection (a killed node before the checks
 *   have marked it down) is retried on another server at once; only a connection that was
 *   established can fail a request. HAProxy retries connection failures only (its default
 *   `retry-on conn-failure`), so a POST the node has started is never sent twice.
 * - `timeout server`/`client 120s`, `timeout tunnel 1h`: a long stream (SSE) or a rental's
 *   notebook WebSocket is not cut by the proxy.
 * - `timeout connect 500ms`: loopback; it also bounds HAProxy's pause before a retry.
 */
export function haproxyConfig(o: { port: number; backends: string[]; balance: string; socket: string }): string {
  const servers = o.backends.map((u, i) => {
    const url = new URL(u);
    if (url.protocol !== "http:") throw new Error(`haproxy helper: http backends only (got ${u})`);
    return `  server n${i} ${url.hostname}:${url.port || 80} check`;
  });
  return [
    "global",
    "  maxconn 2000",
    `  stats socket ${o.socket} mode 600 level admin`,
    "defaults",
    "  mode http",
    "  timeout connect 500ms",
    "  timeout client 120s",
    "  timeout server 120s",
    "  timeout tunnel 1h",
    "  timeout check 2s",
    "  retries 2",
    "  option redispatch 1",
    "frontend appliance",
    `  bind 127.0.0.1:${o.port}`,
    "  default_backend nodes",
    "backend nodes",
    `  balance ${o.balance}`,
    "  option httpchk",
    "  http-check send meth GET uri /health ver HTTP/1.1 hdr Host 127.0.0.1",
    "  http-check expect status 200",
    "  default-server inter 500ms fall 2 rise 1",
    ...servers,
    "",
  ].join("\n");
}

/** One admin-socket command's whole answer (HAProxy closes the socket after answering). */
async function adminCommand(socket: string, command: string): Promise<string> {
  let out = "";
  const done = Promise.withResolvers<string>();
  await Bun.connect({
    unix: socket,
    socket: {
      open: (s) => void s.write(`${command}\n`),
      data: (_s, chunk) => void (out += new TextDecoder().decode(chunk)),
      close: () => done.resolve(out),
      error: (_s, e) => done.reject(e),
    },
  });
  return done.promise;
}

async function listening(port: number, child: Subprocess, stderr: () => string, timeoutMs = 10_000): Promise<void> {
  for (const until = Date.now() + timeoutMs; Date.now() < until; ) {
    if (child.exitCode !== null) throw new Error(`haproxy exited (${child.exitCode}) before listening: ${stderr()}`);
    const ok = await new Promise<boolean>((resolve) =>
      Bun.connect({ hostname: "127.0.0.1", port, socket: { open: (s) => (s.end(), resolve(true)), data() {}, connectError: () => resolve(false), error: () => resolve(false) } }).catch(() => resolve(false)),
    );
    if (ok) return;
    await Bun.sleep(50);
  }
  throw new Error(`haproxy did not listen on 127.0.0.1:${port} within ${timeoutMs} ms: ${stderr()}`);
}

/** Starts an HAProxy of the caller's own in front of `backends`; stop it with `stop()`. */
export async function startHaproxy(o: HaproxyOptions): Promise<Haproxy> {
  if (o.backends.length === 0) throw new Error("haproxy helper: at least one backend");
  const bin = binary();
  sweepLeftovers();
  const dir = mkdtempSync(join(tmpdir(), PREFIX));
  writeFileSync(join(dir, "owner"), String(process.pid));
  const port = await freePort();
  const socket = join(dir, "admin.sock");
  const cfg = join(dir, "haproxy.cfg");
  writeFileSync(cfg, haproxyConfig({ port, backends: o.backends, balance: o.balance ?? "leastconn", socket }));
  const child = Bun.spawn([bin, "-db", "-f", cfg], { stdout: "ignore", stderr: "pipe" });
  writeFileSync(join(dir, "pid"), String(child.pid));
  // Its warnings and alerts, kept for the error when it does not start.
  let stderr = "";
  void (async () => {
    for await (const chunk of child.stderr as ReadableStream<Uint8Array>) stderr = (stderr + new TextDecoder().decode(chunk)).slice(-8_000);
  })().catch(() => {});
  const stop = async () => {
    running.delete(h);
    if (child.exitCode === null) child.kill("SIGTERM");
    const exited = await Promise.race([child.exited.then(() => true), Bun.sleep(3_000).then(() => false)]);
    if (!exited) {
      child.kill("SIGKILL");
      await child.exited;
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const h: Haproxy = {
    url: `http://127.0.0.1:${port}`,
    port,
    pid: child.pid,
    dir,
    async servers() {
      // `show stat` is CSV: "# pxname,svname,…,status,…"; one row per server, plus FRONTEND/BACKEND rows.
      const [head, ...rows] = (await adminCommand(socket, "show stat")).trim().split("\n");
      const cols = head!.replace(/^# /, "").split(",");
      const [px, sv, st] = ["pxname", "svname", "status"].map((c) => cols.indexOf(c));
      return rows
        .map((r) => r.split(","))
        .filter((r) => r[px!] === "nodes" && r[sv!] !== "BACKEND")
        .map((r) => ({ name: r[sv!]!, status: r[st!]! }));
    },
    async waitFor(name, status, timeoutMs = 10_000) {
      let last: ServerState[] = [];
      for (const until = Date.now() + timeoutMs; Date.now() < until; await Bun.sleep(100)) {
        last = await h.servers();
        if (last.find((s) => s.name === name)?.status === status) return;
      }
      throw new Error(`haproxy: server ${name} not ${status} within ${timeoutMs} ms: ${JSON.stringify(last)}`);
    },
    stop,
  };
  running.add(h);
  try {
    await listening(port, child, () => stderr);
  } catch (e) {
    await stop();
    throw e;
  }
  return h;
}

/** Stops every HAProxy this run started and did not stop (test/setup.ts, after the last test). */
export async function stopAllHaproxy(): Promise<void> {
  await Promise.all([...running].map((h) => h.stop()));
}
