import { Command } from "commander";
import { loadConfig } from "../../src/lib/config";
import { startServer } from "../../src/main";
import { applyReload } from "../../src/ops/reload";
import { configTarget, replaceConfigFile, targetConfig } from "../config-file";
import { globals, intOption } from "../context";
import { fail } from "../output";

/** Seconds a stop may take beyond shutdown_timeout_s (cutting streams, stopping batch lines, unloading models). */
export const SHUTDOWN_MARGIN_S = 15;

export function serveCommand(): Command {
  return new Command("serve")
    .description("run the API server")
    .option("--host <host>", "listen address (default 127.0.0.1; 0.0.0.0 for the LAN)")
    .option("--port <n>", "listen port (default 8484)", intOption("--port"))
    .option("--demo", "also serve the tiny generated demo models (generated into the data dir when missing)")
    .action(async (opts: { host?: string; port?: number; demo?: boolean }, c: Command) => {
      try {
        const g = globals(c);
        const sources = { file: g.config, flags: { dataDir: g.dataDir, host: opts.host, port: opts.port, demo: opts.demo } };
        const { config } = loadConfig(sources);
        const running = await startServer(config);
        const { logger } = running.deps;
        let stopping = false;
        const shutdown = async (signal: string) => {
          if (stopping) {
            logger.warn("second signal: exiting without waiting", { signal });
            process.exit(1);
          }
          stopping = true;
          logger.info("shutting down", { signal, timeout_s: config.server.shutdown_timeout_s });
          // Whatever the stop waits on (a native step, a stuck unload), the process ends: requests get
          // shutdown_timeout_s, the stop's own steps SHUTDOWN_MARGIN_S more (issue 41: a wedged decode
          // loop kept a SIGTERM'd server up until kill -9).
          setTimeout(() => {
            logger.error("shutdown did not finish in time: exiting without waiting", { signal, after_s: config.server.shutdown_timeout_s + SHUTDOWN_MARGIN_S });
            logger.flush();
            process.exit(1);
          }, (config.server.shutdown_timeout_s + SHUTDOWN_MARGIN_S) * 1000).unref();
          await running.stop();
          process.exit(0);
        };
        process.on("SIGINT", () => void shutdown("SIGINT"));
        process.on("SIGTERM", () => void shutdown("SIGTERM"));
        const reload = () => {
          const result = applyReload(running.deps, loadConfig(sources).config);
          logger.info("config reloaded", { applied: result.applied, ...result.models });
          if (result.needsRestart.length) logger.warn("config changes that need a restart were not applied", { changes: result.needsRestart });
          return result;
        };
        // The console's Models page adds pulled models to this config file and reloads it (src/2-services/console/pulls.ts).
        running.deps.console.pulls.useConfigFile({
          target: () => configTarget(g.config),
          read: (target) => targetConfig(target, g.dataDir),
          write: (target, text, check) => replaceConfigFile(target, text, g.dataDir, check),
          reload,
        });
        // SIGHUP: reload limits, prices and the served models from the same sources; a bad config
        // (or a new model whose files are missing) keeps the old one.
        process.on("SIGHUP", () => {
          try {
            reload();
          } catch (e) {
            logger.error("config reload failed; the running config is kept", { error: (e as Error).message });
          }
          // The certificate files are re-read on every SIGHUP (`appliance tls renew` rewrites them in place).
          const tls = running.deps.config.server.tls;
          if (tls && running.server.tls) {
            try {
              running.reloadTls(tls);
            } catch (e) {
              logger.error("TLS certificate reload failed; the running certificate is kept", { error: (e as Error).message });
            }
          }
        });
      } catch (e) {
        fail(e);
      }
    });
}
