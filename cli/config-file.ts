import { chmodSync, existsSync, mkdirSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import { findConfigFile, loadConfig, type Config } from "../src/lib/config";

// The config file commands that edit it (`models add`, `tls init`) write to: the one the CLI reads,
// else the default path, created. Edits are text edits (comments kept) made by the caller; the
// result replaces the file only once it loads as the server will load it.

export interface ConfigTarget {
  file: string;
  exists: boolean;
}

export function configTarget(flag: string | undefined): ConfigTarget {
  const found = findConfigFile(flag, process.env);
  if (found) return { file: found, exists: existsSync(found) };
  const base = process.env.XDG_CONFIG_HOME || join(process.env.HOME || homedir(), ".config");
  return { file: join(base, "appliance", "config.toml"), exists: false };
}

/** The config as commands see it; with no file yet, the built-in defaults with the environment's and flags' data dir. */
export function targetConfig(target: ConfigTarget, dataDir: string | undefined): Config {
  return loadConfig({ file: target.exists ? target.file : "/dev/null", flags: { dataDir } }).config;
}

/**
 * Replaces the file with `text` (its mode kept; 0600 when new) once the text loads as a config and
 * passes `check`; on any failure the file is left as it was.
 */
export function replaceConfigFile(target: ConfigTarget, text: string, dataDir: string | undefined, check: (config: Config) => void = () => {}): void {
  const temp = `${target.file}.${process.pid}.tmp`;
  mkdirSync(dirname(target.file), { recursive: true });
  writeFileSync(temp, text, { mode: 0o600 });
  try {
    if (target.exists) chmodSync(temp, statSync(target.file).mode & 0o777);
    check(loadConfig({ file: temp, flags: { dataDir } }).config);
    renameSync(temp, target.file);
  } catch (e) {
    rmSync(temp, { force: true });
    throw e;
  }
}
