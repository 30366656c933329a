import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

// One server per data dir: in-flight credit holds and rate windows live in that process.

export class DataDirBusyError extends Error {}

export function lockDataDir(dataDir: string): () => void {
  const file = join(dataDir, "server.pid");
  if (existsSync(file)) {
    const pid = Number(readFileSync(file, "utf8").trim());
    if (pid && pid !== process.pid && alive(pid))
      throw new DataDirBusyError(`another appliance server (pid ${pid}) is using the data dir ${dataDir}`);
  }
  writeFileSync(file, `${process.pid}\n`, { mode: 0o600 });
  return () => {
    try {
      if (readFileSync(file, "utf8").trim() === String(process.pid)) rmSync(file);
    } catch {}
  };
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}
