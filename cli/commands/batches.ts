import { Command } from "commander";
import { join } from "node:path";
import { createBatchesService, type BatchObject } from "../../src/2-services/batches/service";
import { systemClock } from "../../src/lib/clock";
import { loadConfig } from "../../src/lib/config";
import { createFilesService } from "../../src/2-services/files/service";
import { createLogger } from "../../src/lib/log";
import { batchesStoreOf, filesStoreOf, openConfiguredStore } from "../../src/4-store/store";
import { globals, intOption } from "../context";
import { emit, fail, table } from "../output";

// `appliance batches list|show|cancel` on the configured store (the data dir's SQLite, or
// PostgreSQL), through the batch service the API uses. A running server's worker sees a cancel at
// its next poll (half a second).

const TERMINAL = new Set(["completed", "failed", "expired", "cancelled"]);

function withBatches<T>(c: Command, fn: (batches: ReturnType<typeof createBatchesService>) => T | Promise<T>) {
  return (async () => {
    try {
      const g = globals(c);
      const { config } = loadConfig({ file: g.config, flags: { dataDir: g.dataDir } });
      const store = await openConfiguredStore(config);
      try {
        const files = createFilesService({ store: filesStoreOf(store, join(config.server.data_dir, "files")), clock: systemClock, logger: createLogger({ level: "error" }) });
        await fn(createBatchesService({ store: batchesStoreOf(store), files, clock: systemClock }));
      } finally {
        await store.close();
      }
    } catch (e) {
      fail(e);
    }
  })();
}

export function progressBar(b: BatchObject, width = 30): string {
  const { total, completed, failed } = b.request_counts;
  const doneCount = completed + failed;
  const ratio = total ? doneCount / total : TERMINAL.has(b.status) ? 1 : 0;
  const filled = Math.round(ratio * width);
  return `[${"#".repeat(filled)}${"-".repeat(width - filled)}] ${String(Math.floor(ratio * 100)).padStart(3)}% ${doneCount}/${total} (completed ${completed}, failed ${failed}) ${b.status}`;
}

function human(b: BatchObject): string {
  const when = (s: number | null) => (s === null ? "-" : new Date(s * 1000).toISOString().replace(/\.\d+Z$/, "Z"));
  const lines = [
    `batch ${b.id} ${b.endpoint}`,
    `  ${progressBar(b)}`,
    `  input file:  ${b.input_file_id}`,
    `  output file: ${b.output_file_id ?? "-"}`,
    `  error file:  ${b.error_file_id ?? "-"}`,
    `  created ${when(b.created_at)}, expires ${when(b.expires_at)}`,
  ];
  for (const e of b.errors?.data ?? []) lines.push(`  line ${e.line ?? "-"}: ${e.code}: ${e.message}`);
  return lines.join("\n");
}

export function batchesCommand(): Command {
  const cmd = new Command("batches").description("list, show (and watch) and cancel batches");

  cmd
    .command("list")
    .description("the most recent batches of every key")
    .option("--limit <n>", "how many", intOption("--limit"), 20)
    .option("--json", "print JSON")
    .action((opts: { limit: number; json?: boolean }, c: Command) =>
      withBatches(c, async (batches) =>
        emit(opts.json, await batches.admin.recent(opts.limit), (list) =>
          table(
            list.map((b) => ({
              id: b.id,
              status: b.status,
              endpoint: b.endpoint,
              progress: `${b.request_counts.completed + b.request_counts.failed}/${b.request_counts.total}`,
              failed: String(b.request_counts.failed),
              created: new Date(b.created_at * 1000).toISOString().replace(/\.\d+Z$/, "Z"),
            })),
            ["id", "status", "endpoint", "progress", "failed", "created"],
          ),
        ),
      ),
    );

  cmd
    .command("show <id>")
    .description("one batch; with --watch, its progress until it ends")
    .option("--watch", "keep showing progress until the batch ends")
    .option("--interval <ms>", "how often --watch looks", intOption("--interval"), 1000)
    .option("--json", "print JSON")
    .action((id: string, opts: { watch?: boolean; interval: number; json?: boolean }, c: Command) =>
      withBatches(c, async (batches) => {
        let b = await batches.admin.get(id);
        if (!opts.watch) return emit(opts.json, b, human);
        const tty = process.stdout.isTTY;
        let last = "";
        for (;;) {
          const line = opts.json ? JSON.stringify(b) : progressBar(b);
          if (line !== last) process.stdout.write(tty && !opts.json ? `\r${line}` : `${line}\n`);
          last = line;
          if (TERMINAL.has(b.status)) break;
          await Bun.sleep(opts.interval);
          b = await batches.admin.get(id);
        }
        if (tty && !opts.json) process.stdout.write("\n");
        if (!opts.json) process.stdout.write(human(b) + "\n");
      }),
    );

  cmd
    .command("cancel <id>")
    .description("cancel a batch: lines not yet started are stopped; what finished is delivered")
    .option("--json", "print JSON")
    .action((id: string, opts: { json?: boolean }, c: Command) => withBatches(c, async (batches) => emit(opts.json, await batches.admin.cancel(id), human)));

  return cmd;
}
