import { join } from "node:path";

export const CLI = join(import.meta.dir, "..", "..", "cli", "main.ts");

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
  json<T = any>(): T;
}

/** Runs the real CLI in a child process against `dir` as data dir, with no user config in reach. */
export function cli(dir: string, args: string[], env: Record<string, string> = {}): CliResult {
  const r = Bun.spawnSync([process.execPath, CLI, ...args], {
    env: { PATH: process.env.PATH ?? "", HOME: dir, XDG_CONFIG_HOME: join(dir, "no-config"), APPLIANCE_DATA_DIR: dir, ...env },
    stdout: "pipe",
    stderr: "pipe",
  });
  const stdout = r.stdout.toString();
  return { code: r.exitCode ?? -1, stdout, stderr: r.stderr.toString(), json: () => JSON.parse(stdout) };
}
