import { Command } from "commander";
import { loadConfig } from "../../src/config";
import { startServer } from "../../src/main";
import { globals, intOption } from "../context";
import { fail } from "../output";

export function serveCommand(): Command {
  return new Command("serve")
    .description("run the API server")
    .option("--host <host>", "listen address (default 127.0.0.1; 0.0.0.0 for the LAN)")
    .option("--port <n>", "listen port (default 8484)", intOption("--port"))
    .option("--demo", "also serve the tiny generated demo models (generated into the data dir when missing)")
    .action(async (opts: { host?: string; port?: number; demo?: boolean }, c: Command) => {
      try {
        const g = globals(c);
        const { config } = loadConfig({
          file: g.config,
          flags: { dataDir: g.dataDir, host: opts.host, port: opts.port, demo: opts.demo },
        });
        const running = await startServer(config);
        const shutdown = async (signal: string) => {
          running.deps.logger.info("shutting down", { signal });
          await running.stop();
          process.exit(0);
        };
        process.on("SIGINT", () => void shutdown("SIGINT"));
        process.on("SIGTERM", () => void shutdown("SIGTERM"));
      } catch (e) {
        fail(e);
      }
    });
}
