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

/**
 * `appliance serve …` in a child process against `dir`, with no user config in reach; resolves once
 * it listens, with its URL and what it printed on stderr so far (the first-start banner).
 */
export async function serveCli(dir: string, args: string[], env: Record<string, string> = {}) {
  const child = Bun.spawn([process.execPath, CLI, "serve", ...args], {
    env: { PATH: process.env.PATH ?? "", HOME: dir, XDG_CONFIG_HOME: join(dir, "no-config"), APPLIANCE_DATA_DIR: dir, ...env },
    stdout: "pipe",
    stderr: "pipe",
  });
  return { child, ...(await untilListening(child.stderr)) };
}

/**
 * Reads a starting server's stderr until it says where it listens: its URL, the admin key it
 * printed (first start of a data dir only) and everything printed so far. The stream is released,
 * not consumed, so a caller may read on.
 */
export async function untilListening(stderr: ReadableStream<Uint8Array>, timeoutMs = 150_000) {
  let banner = "";
  const reader = stderr.getReader();
  const until = Date.now() + timeoutMs;
  try {
    while (!/listening on (http:\/\/\S+)/.test(banner)) {
      if (Date.now() > until) throw new Error(`server did not listen within ${timeoutMs} ms: ${banner}`);
      const { value, done } = await reader.read();
      if (done) throw new Error(`server exited early: ${banner}`);
      banner += new TextDecoder().decode(value);
    }
  } finally {
    reader.releaseLock();
  }
  return { url: /listening on (http:\/\/\S+)/.exec(banner)![1]!, key: /sk-apl-[0-9A-Za-z]{44}/.exec(banner)?.[0], banner };
}
