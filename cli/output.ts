import { ApiError } from "../src/1-api/http/errors";
import { ConfigError } from "../src/lib/config";
import { BackupError } from "../src/4-store/backup";
import { StoreError } from "../src/4-store/db";
import { DataDirBusyError } from "../src/4-store/lock";

/** Prints `data` as JSON with --json, else the human rendering. */
export function emit<T>(json: boolean | undefined, data: T, human: (d: T) => string): void {
  process.stdout.write(json ? JSON.stringify(data, null, 2) + "\n" : human(data) + "\n");
}

export function table(rows: Record<string, string>[], columns: string[]): string {
  if (rows.length === 0) return "(none)";
  const widths = columns.map((c) => Math.max(c.length, ...rows.map((r) => (r[c] ?? "").length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i]!)).join("  ").trimEnd();
  return [line(columns.map((c) => c.toUpperCase())), ...rows.map((r) => line(columns.map((c) => r[c] ?? "")))].join("\n");
}

export function when(ms: number | null): string {
  return ms === null ? "-" : new Date(ms).toISOString().replace(/\.\d+Z$/, "Z");
}

/** Known failures print one clear line and exit 1; anything else is a bug and shows its stack. */
export function fail(e: unknown): never {
  if (e instanceof ApiError || e instanceof ConfigError || e instanceof StoreError || e instanceof DataDirBusyError || e instanceof BackupError) {
    process.stderr.write(`error: ${e.message}\n`);
  } else if (e instanceof Error && e.name === "UsageError") {
    process.stderr.write(`error: ${e.message}\n`);
  } else {
    process.stderr.write(`error: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  }
  process.exit(1);
}

export class UsageError extends Error {
  override name = "UsageError";
}
