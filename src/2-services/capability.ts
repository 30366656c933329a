import type { Clock } from "../lib/clock";
import type { Config } from "../lib/config";
import type { Meter } from "./billing/meter";
import type { Registry } from "../3-engines/registry";
import type { Logger } from "../lib/log";

/**
 * What a capability's service (embeddings, classify, images) is built from: the models it runs on,
 * the meter it charges through, and the clock and log. Declared here, below the composition root
 * that builds it, so the services need not import the root.
 */
export interface CapabilityDeps {
  config: Config;
  registry: Registry;
  meter: Meter;
  clock: Clock;
  logger: Logger;
  /** Counts an answered /v1/decisions (items: questions) or /v1/rerank (items: documents) request in /metrics. */
  judged?: (endpoint: "/v1/decisions" | "/v1/rerank", model: string, items: number, inputTokens: number) => void;
}
