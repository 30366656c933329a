import { dirname, isAbsolute, join, resolve } from "node:path";
import type { Config } from "../../lib/config";
import { GgufFormatError, ggufVerdictSync } from "../../3-engines/gguf-check";
import { fail, formatBytes, ok, warn, type Check, type Probes } from "./check";

// Model files, the data dir and the disk under it, and the port: what `serve` needs from the machine.

/** Why a model file's GGUF header does not hold together (src/3-engines/gguf-check.ts), else null (also when it cannot be read). */
export function ggufProblem(path: string): string | null {
  try {
    ggufVerdictSync(path);
    return null;
  } catch (e) {
    return e instanceof GgufFormatError ? e.reason : null;
  }
}

/** One check per configured model (its files and their sizes); one for the demo models when on. */
export function checkModels(
  config: Pick<Config, "models" | "models_dir" | "demo" | "server">,
  probes: Pick<Probes, "kind" | "size">,
  gguf: (path: string) => string | null = ggufProblem,
): Check[] {
  const out = config.models.map((m, i): Check => {
    const name = `model ${m.id}`;
    const sizes: string[] = [];
    const problems: { role: string; text: string }[] = [];
    for (const [role, p] of Object.entries(m.files)) {
      const abs = isAbsolute(p) ? p : resolve(config.models_dir, p);
      if (probes.kind(abs) === "missing") {
        problems.push({ role, text: `files.${role} not found: ${abs}` });
        continue;
      }
      const size = probes.size(abs);
      // An interrupted download leaves an empty file behind; no engine loads it.
      if (size === 0) problems.push({ role, text: `files.${role} is empty: ${abs}` });
      else sizes.push(`${role} ${formatBytes(size)}`);
      // What llama.cpp reads (a chat model's files, any *.gguf): a header that does not hold together fails the model's load.
      const why = size > 0 && probes.kind(abs) === "file" && (m.kind === "chat" || abs.toLowerCase().endsWith(".gguf")) ? gguf(abs) : null;
      if (why) problems.push({ role, text: `files.${role} (${abs}) is ${why}` });
    }
    if (problems.length) {
      return fail(name, problems.map((p) => p.text).join("; "), `appliance models pull ${m.id}, or fix models[${i}].files.${problems[0]!.role} in the config`);
    }
    return ok(name, `${m.kind}, ${sizes.join(", ")}`);
  });
  if (config.demo) {
    const dir = join(config.server.data_dir, "demo-models");
    const there = probes.kind(dir) === "dir";
    out.push(ok("demo models", there ? `${dir} (${formatBytes(probes.size(dir))})` : `not generated yet: \`appliance serve --demo\` writes them into ${dir}`));
  }
  if (!out.length) out.push(ok("models", "none configured (add [[models]] to the config, or try `appliance serve --demo`)"));
  return out;
}

/** The folder itself, or the closest of its parents that exists. */
export function nearestExisting(path: string, kind: Probes["kind"]): string {
  let p = path;
  while (kind(p) === "missing" && dirname(p) !== p) p = dirname(p);
  return p;
}

const DATA_DIR_HINT = "choose another with --data-dir or APPLIANCE_DATA_DIR, or chown it to the user running the appliance";

export function checkDataDir(dir: string, probes: Pick<Probes, "kind" | "writable">): Check {
  const name = "data dir";
  const kind = probes.kind(dir);
  if (kind === "file") return fail(name, `${dir} is a file, not a folder`, DATA_DIR_HINT);
  if (kind === "dir") return probes.writable(dir) ? ok(name, `${dir} (writable)`) : fail(name, `${dir} is not writable by this user`, DATA_DIR_HINT);
  const parent = nearestExisting(dir, probes.kind);
  if (probes.kind(parent) === "dir" && probes.writable(parent)) return ok(name, `${dir} (created at first start)`);
  return fail(name, `${dir} does not exist and cannot be created (${parent} is not a writable folder)`, DATA_DIR_HINT);
}

export const DISK_WARN_BYTES = 5 * 1024 ** 3;
export const DISK_FAIL_BYTES = 500 * 1024 ** 2;

export function checkDisk(dir: string, probes: Pick<Probes, "kind" | "statfs">): Check {
  const name = "disk space";
  const at = nearestExisting(dir, probes.kind);
  let s: { free: number; total: number };
  try {
    s = probes.statfs(at);
  } catch (e) {
    return warn(name, `cannot read the free space of ${at}: ${(e as Error).message}`, "check the data dir's filesystem by hand (df -h)");
  }
  const detail = `${formatBytes(s.free)} free of ${formatBytes(s.total)} on the data dir's filesystem`;
  const hint = "free some space: the store, uploaded files, batch results and demo models are written there";
  if (s.free < DISK_FAIL_BYTES) return fail(name, `${detail} (under ${formatBytes(DISK_FAIL_BYTES)})`, hint);
  if (s.free < DISK_WARN_BYTES) return warn(name, `${detail} (under ${formatBytes(DISK_WARN_BYTES)})`, hint);
  return ok(name, detail);
}

/** Listens on the configured host:port for a moment; an address in use is almost always a running server. */
export async function checkPort(server: Pick<Config["server"], "host" | "port" | "data_dir">, probes: Pick<Probes, "listen" | "readText">): Promise<Check> {
  const name = "port";
  const { host, port } = server;
  const at = `${host}:${port}`;
  const err = await probes.listen(host, port);
  if (err === null) return ok(name, port === 0 ? `${host}: a free port is picked at start` : `${at} is free`);
  if (err === "EADDRINUSE") {
    const pid = probes.readText(join(server.data_dir, "server.pid"))?.trim();
    return fail(
      name,
      `another process listens on ${port} (is the appliance already running? \`appliance serve\` writes server.pid in the data dir${pid ? `; it names pid ${pid}` : ""})`,
      "stop that process, or choose another port (server.port, APPLIANCE_PORT or `appliance serve --port`)",
    );
  }
  if (err === "EACCES") return fail(name, `no permission to listen on ${at}`, "ports below 1024 need root or CAP_NET_BIND_SERVICE: choose a port ≥ 1024");
  if (err === "EADDRNOTAVAIL" || err === "ENOTFOUND" || err === "EAI_NONAME") {
    return fail(name, `cannot listen on ${at}: ${host} is not an address of this machine (${err})`, "set server.host to 127.0.0.1, 0.0.0.0 or one of this machine's addresses");
  }
  return fail(name, `cannot listen on ${at}: ${err}`, "check server.host and server.port");
}
