import type { Database } from "bun:sqlite";
import { createAccountService, type AccountService } from "./accounts/service";
import { createLimits, type Limits } from "./billing/limits";
import { createMeter, type Meter } from "./billing/meter";
import { systemClock, type Clock } from "./clock";
import type { Config } from "./config";
import { createChatService, type ChatService } from "./chat/service";
import { llamaChatFactory } from "./engines/llama/factory";
import { createRegistry, type EngineFactories, type Registry } from "./engines/registry";
import { createLogger, type Logger } from "./log";

/** Everything createApp needs: built once by main.ts, by the CLI, and by tests. */
export interface AppDeps {
  config: Config;
  db: Database;
  clock: Clock;
  logger: Logger;
  accounts: AccountService;
  limits: Limits;
  meter: Meter;
  registry: Registry;
  chat: ChatService;
  startedAt: number;
}

export function createServices(
  config: Config,
  db: Database,
  opts: { clock?: Clock; logger?: Logger; engines?: EngineFactories } = {},
): AppDeps {
  const clock = opts.clock ?? systemClock;
  const logger = opts.logger ?? createLogger({ level: config.server.log_level });
  const limits = createLimits(db, config.limits, clock);
  const meter = createMeter(db, config, limits, clock);
  const registry = createRegistry(config.models, config.retired_models, {
    baseDir: config.models_dir,
    created: clock.now(),
    engines: opts.engines ?? { chat: llamaChatFactory(config, logger) },
  });
  return {
    config,
    db,
    clock,
    logger,
    accounts: createAccountService(db, config.limits, clock),
    limits,
    meter,
    registry,
    chat: createChatService({ registry, meter, clock, logger }),
    startedAt: clock.now(),
  };
}
