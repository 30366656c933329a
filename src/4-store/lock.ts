import { existsSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

// One server per data dir: in-flight credit holds and rate windows live in that process.
// A pid file guards against other processes, a set against a second server in this one.

export class DataDirBusyError extends Error {}

const lockedHere = new Set<string>();

export function lockDataDir(dataDir: string): () => void {
  const dir = realpathSync(dataDir);
  const file = join(dir, "server.pid");
  if (lockedHere.has(dir)) throw new DataDirBusyError(`a server in this process is already using the data dir ${dir}`);
  if (existsSync(file)) {
    const pid = Number(readFileSync(file, "utf8").trim());
    if (pid && pid !== process.pid && alive(pid))
      throw new DataDirBusyError(`another appliance server (pid ${pid}) is using the data dir ${dir}`);
  }
  writeFileSync(file, `${process.pid}\n`, { mode: 0o600 });
  lockedHere.add(dir);
  return () => {
    lockedHere.delete(dir);
    try {
      if (readFileSync(file, "utf8").trim() === String(process.pid)) rmSync(file);
    } catch {}
  };
}

/** The pid of the server running on this data dir (its live server.pid), or null. */
export function runningServerPid(dataDir: string): number | null {
  try {
    const pid = Number(readFileSync(join(dataDir, "server.pid"), "utf8").trim());
    return Number.isInteger(pid) && pid > 0 && alive(pid) ? pid : null;
  } catch {
    return null;
  }
}

/** Whether a process with this pid exists (EPERM: it exists, owned by another user). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}
