#!/usr/bin/env bun
import { Command } from "commander";
import { VERSION } from "../src/lib/version";
import { accountsCommand } from "./commands/accounts";
import { backupCommand, restoreCommand } from "./commands/backup";
import { batchesCommand } from "./commands/batches";
import { configCommand } from "./commands/config";
import { doctorCommand } from "./commands/doctor";
import { keysCommand } from "./commands/keys";
import { modelsCommand } from "./commands/models";
import { nodesCommand } from "./commands/nodes";
import { psCommand } from "./commands/ps";
import { internalCommand } from "./commands/internal";
import { serveCommand } from "./commands/serve";
import { storeCommand } from "./commands/store";
import { tlsCommand } from "./commands/tls";

const program = new Command("appliance")
  .description("Self-hosted inference and GPU-rental appliance")
  .version(VERSION)
  .option("-c, --config <file>", "config file (TOML); default $APPLIANCE_CONFIG or ~/.config/appliance/config.toml")
  .option("-d, --data-dir <dir>", "data directory; default $APPLIANCE_DATA_DIR or ~/.local/share/appliance")
  .showHelpAfterError()
  .addCommand(serveCommand())
  .addCommand(accountsCommand())
  .addCommand(keysCommand())
  .addCommand(batchesCommand())
  .addCommand(configCommand())
  .addCommand(doctorCommand())
  .addCommand(modelsCommand())
  .addCommand(psCommand())
  .addCommand(tlsCommand())
  .addCommand(backupCommand())
  .addCommand(restoreCommand())
  .addCommand(storeCommand())
  .addCommand(nodesCommand())
  .addCommand(internalCommand(), { hidden: true });

await program.parseAsync(process.argv);
