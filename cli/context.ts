import type { Database } from "bun:sqlite";
import { InvalidArgumentError, type Command } from "commander";
import { parseUsd } from "../src/2-services/billing/pricing";
import { createAccountService, type AccountService } from "../src/2-services/accounts/service";
import { systemClock } from "../src/lib/clock";
import { loadConfig, type Config } from "../src/lib/config";
import { openStore } from "../src/4-store/db";
import { fail } from "./output";

export interface GlobalOptions {
  config?: string;
  dataDir?: string;
}

/** The root command's options, seen from any subcommand. */
export function globals(cmd: Command): GlobalOptions {
  return cmd.optsWithGlobals() as GlobalOptions;
}

/**
 * Offline commands work on the local data dir through the same services the server uses, so
 * `appliance keys create` works before the server ever ran (SQLite WAL lets both run at once).
 */
export async function withAccounts<T>(cmd: Command, fn: (accounts: AccountService, config: Config, db: Database) => T | Promise<T>): Promise<void> {
  try {
    const g = globals(cmd);
    const { config } = loadConfig({ file: g.config, flags: { dataDir: g.dataDir } });
    const db = openStore(config.server.data_dir);
    try {
      await fn(createAccountService(db, config.limits, systemClock), config, db);
    } finally {
      db.close();
    }
  } catch (e) {
    fail(e);
  }
}

export function intOption(name: string) {
  return (v: string): number => {
    if (!/^\d+$/.test(v)) throw new InvalidArgumentError(`${name} must be a whole number, got "${v}"`);
    return Number(v);
  };
}

/** A dollar amount from the command line, exactly, as micro-dollars. */
export function usd(v: string): number {
  try {
    return parseUsd(v);
  } catch (e) {
    throw new InvalidArgumentError((e as Error).message);
  }
}
