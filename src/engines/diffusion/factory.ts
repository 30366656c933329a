import type { Config } from "../../config";
import type { Logger } from "../../log";
import type { EngineFactories } from "../registry";

// Placeholder while the diffusion engine is being written (issue 5); replaced in full.
export function diffusionFactory(_config: Pick<Config, "engines">, _logger: Logger): Pick<EngineFactories, "image"> {
  return {};
}
