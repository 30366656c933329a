import { Command } from "commander";
import { resolve } from "node:path";
import { loadConfig } from "../../src/lib/config";
import { backupDataDir, restoreDataDir } from "../../src/4-store/backup";
import { globals } from "../context";
import { emit, fail, UsageError } from "../output";

/** backup and restore read and write the data dir's SQLite store; PostgreSQL has its own tools. */
const ON_POSTGRES =
  "the store is PostgreSQL ([store] url): back it up with `pg_dump -Fc -f appliance.dump URL` and restore with `pg_restore -d URL appliance.dump` (web/docs/postgresql.md); a node's data dir keeps only its models and lock";

/** `appliance backup FILE`: an online, consistent copy of the store and its stored files. */
export function backupCommand(): Command {
  return new Command("backup")
    .description("write a consistent copy of the store and stored files to FILE (a tar); safe while the server runs")
    .argument("<file>", "the backup file to write")
    .option("--json", "print the manifest as JSON")
    .action((file: string, opts: { json?: boolean }, c: Command) => {
      try {
        const g = globals(c);
        const { config } = loadConfig({ file: g.config, flags: { dataDir: g.dataDir } });
        if (config.store.url) throw new UsageError(ON_POSTGRES);
        const m = backupDataDir(config.server.data_dir, resolve(file));
        const bytes = m.entries.reduce((n, e) => n + e.bytes, 0);
        emit(opts.json, m, () => `backed up ${config.server.data_dir} to ${resolve(file)}: store schema ${m.schema}, ${m.entries.length - 1} stored files, ${bytes} bytes`);
      } catch (e) {
        fail(e);
      }
    });
}

/** `appliance restore FILE`: back into the data dir, every entry checked first. */
export function restoreCommand(): Command {
  return new Command("restore")
    .description("restore a backup into the data dir (stop the server first)")
    .argument("<file>", "a file written by `appliance backup`")
    .option("--force", "replace an existing store (it is kept beside it as appliance.sqlite.before-restore-<time>)")
    .option("--json", "print JSON")
    .action((file: string, opts: { force?: boolean; json?: boolean }, c: Command) => {
      try {
        const g = globals(c);
        const { config } = loadConfig({ file: g.config, flags: { dataDir: g.dataDir } });
        if (config.store.url) throw new UsageError(ON_POSTGRES);
        const r = restoreDataDir(resolve(file), config.server.data_dir, { force: opts.force });
        emit(opts.json, { data_dir: config.server.data_dir, schema: r.manifest.schema, entries: r.manifest.entries.length, kept_as: r.keptAs }, () =>
          `restored ${resolve(file)} (made ${r.manifest.created_at} by appliance ${r.manifest.version}) into ${config.server.data_dir}` + (r.keptAs ? `; the previous store is kept as ${r.keptAs}` : ""),
        );
      } catch (e) {
        fail(e);
      }
    });
}
