import { Command } from "commander";
import { loadConfig } from "../../src/lib/config";
import { MIGRATIONS, openStore, schemaVersion } from "../../src/4-store/db";
import { migratePostgres, pgSchemaVersion, PG_MIGRATIONS } from "../../src/4-store/pg/db";
import { openPostgresStore, redactUrl } from "../../src/4-store/store";
import { copySqliteToPostgres } from "../../src/ops/store-copy";
import { globals } from "../context";
import { emit, fail, UsageError } from "../output";

// `appliance store …` (issue 44): the configured store's schema, and moving a SQLite appliance to
// PostgreSQL.

export function storeCommand(): Command {
  const cmd = new Command("store").description("the store the state is kept in: SQLite in the data dir, or PostgreSQL ([store] url)");

  cmd
    .command("migrate")
    .description("apply the migrations the configured store lacks (every process applies them at start too; this does it ahead, under the same lock)")
    .option("--json", "print JSON")
    .action(async (opts: { json?: boolean }, c: Command) => {
      try {
        const g = globals(c);
        const { config } = loadConfig({ file: g.config, flags: { dataDir: g.dataDir } });
        if (config.store.url) {
          const store = await openPostgresStore(config.store.url, { migrate: false });
          try {
            const before = await pgSchemaVersion(store.pg.money);
            const applied = await migratePostgres(store.pg.money);
            emit(opts.json, { store: "postgres", at: store.describe, schema: before + applied, applied }, () =>
              `${store.describe}: ${applied ? `applied ${applied} migration(s), schema ${before} → ${before + applied}` : `schema ${before}, up to date`} (this build knows ${PG_MIGRATIONS.length})`,
            );
          } finally {
            await store.close();
          }
        } else {
          // openStore migrates under SQLite's write lock as it opens.
          const db = openStore(config.server.data_dir);
          try {
            const schema = schemaVersion(db);
            emit(opts.json, { store: "sqlite", at: db.filename, schema }, () => `${db.filename}: schema ${schema}, up to date (this build knows ${MIGRATIONS.length})`);
          } finally {
            db.close();
          }
        }
      } catch (e) {
        fail(e);
      }
    });

  cmd
    .command("copy")
    .description("copy this data dir's SQLite store (accounts, keys, balances, usage, files, batches, rentals, threads) into an empty PostgreSQL database; stop the server first")
    .requiredOption("--to <url>", "postgres://USER[:PASSWORD]@HOST:PORT/DB, an empty database")
    .option("--json", "print JSON")
    .action(async (opts: { to: string; json?: boolean }, c: Command) => {
      try {
        if (!/^postgres(ql)?:\/\//.test(opts.to)) throw new UsageError("--to must be a postgres:// URL");
        const g = globals(c);
        const { config } = loadConfig({ file: g.config, flags: { dataDir: g.dataDir } });
        const report = await copySqliteToPostgres(config.server.data_dir, opts.to, (line) => {
          if (!opts.json) process.stderr.write(`  ${line}\n`);
        });
        emit(opts.json, { from: config.server.data_dir, to: redactUrl(opts.to), ...report }, () =>
          [
            `copied ${config.server.data_dir} into ${redactUrl(opts.to)}: ${report.tables.reduce((n, t) => n + t.rows, 0)} rows in ${report.tables.length} tables, ${report.files.copied} files (${report.files.bytes} bytes), schema ${report.schema}`,
            ...(report.files.missing.length ? [`warning: ${report.files.missing.length} file(s) had no bytes on disk (or not all of them) and arrive deleted: ${report.files.missing.join(", ")}`] : []),
            `next: set [store] url = "${redactUrl(opts.to)}" (with its password) in the config, or APPLIANCE_STORE_URL, and start the server`,
          ].join("\n"),
        );
      } catch (e) {
        fail(e);
      }
    });

  return cmd;
}
