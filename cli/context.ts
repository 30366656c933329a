import { InvalidArgumentError, type Command } from "commander";
import { parseUsd } from "../src/2-services/billing/pricing";
import { createAccountService, type AccountService } from "../src/2-services/accounts/service";
import { systemClock } from "../src/lib/clock";
import { loadConfig, type Config } from "../src/lib/config";
import { accountStoreOf, openConfiguredStore, type Store } from "../src/4-store/store";
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
 * Offline commands work on the configured store (the data dir's SQLite file, or [store] url's
 * PostgreSQL) through the same services the server uses, so `appliance keys create` works before
 * the server ever ran, and while it runs (SQLite's WAL and PostgreSQL both let them share).
 */
export async function withStore<T>(cmd: Command, fn: (store: Store, config: Config) => T | Promise<T>): Promise<void> {
  try {
    const g = globals(cmd);
    const { config } = loadConfig({ file: g.config, flags: { dataDir: g.dataDir } });
    const store = await openConfiguredStore(config);
    try {
      await fn(store, config);
    } finally {
      await store.close();
    }
  } catch (e) {
    fail(e);
  }
}

/** withStore, with the account service on it. */
export function withAccounts<T>(cmd: Command, fn: (accounts: AccountService, config: Config, store: Store) => T | Promise<T>): Promise<void> {
  return withStore(cmd, async (store, config) => {
    const accounts = createAccountService(accountStoreOf(store), config.limits, systemClock);
    try {
      return await fn(accounts, config, store);
    } finally {
      accounts.close();
    }
  });
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
