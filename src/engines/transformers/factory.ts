import type { Config } from "../../config";
import type { Logger } from "../../log";
import type { EngineFactories } from "../registry";

// Placeholder while the transformers.js engines are being written (issue 5); replaced in full.
export function transformersFactories(_config: Pick<Config, "engines">, _logger: Logger): Pick<EngineFactories, "embedding" | "classifier"> {
  return {};
}
