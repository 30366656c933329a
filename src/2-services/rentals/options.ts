import type { Clock } from "../../lib/clock";
import type { Logger } from "../../lib/log";
import type { RentalStore } from "../../4-store/rentals";
import type { Meter } from "../billing/meter";
import type { RentalNode } from "./inventory";
import type { RentalAccess } from "./access";
import type { Launcher } from "./launchers/types";
import type { RentalCluster } from "./cluster";

// What the rentals service (service.ts) is built from; its parts (health.ts, ticks.ts) take the
// fields they use.

export interface RentalsOptions {
  store: RentalStore;
  /**
   * Who holds this service's leases. One server per SQLite data dir: the default, "local", takes
   * its leases back at once when it restarts. On PostgreSQL, one name per process.
   */
  owner?: string;
  /** How long a lease lasts without renewal: how soon another process takes over a dead one's rentals. */
  leaseMs?: number;
  /** GPU minutes are charged through it, on the ledger every other capability uses. */
  meter: Pick<Meter, "chargeMinutes" | "balance">;
  clock: Clock;
  logger: Logger;
  dataDir: string;
  /** The nodes this appliance can hand out (config and discovery). */
  nodes: () => RentalNode[];
  launchers: Record<string, Launcher>;
  /** Nodes reserved for a loaded inference model: not rentable. */
  reserved?: () => ReadonlySet<string>;
  /**
   * Before a launch: frees the node's GPUs of idle models (they are unloaded); throws, naming the
   * models, when one of them is busy or pinned by now (the rental then fails, unbilled).
   */
  beforeLaunch?: (gpuUuids: readonly string[]) => Promise<void>;
  maxHours: number;
  /** How long a launch may take to answer before the rental fails. */
  readyTimeoutMs: number;
  /** How often launches are probed and running rentals billed, probed and auto-stopped. */
  tickMs?: number;
  /** How long an Idempotency-Key is remembered. */
  idempotencyMs?: number;
  /**
   * How new rentals are reached (src/2-services/rentals/access.ts); default `direct` here (the config's default is `proxy`). A rental keeps the access
   * it was launched with (its handle records it).
   */
  access?: RentalAccess;
  /**
   * The appliance's public base URL (`publicBaseOf`): proxied rentals' connection URLs start with
   * it. A function where the port is known only once the main listener is bound (`port = 0`).
   */
  publicBase?: string | (() => string);
  /** This appliance as a node of a cluster (cluster.ts); default: one node on its own. */
  cluster?: RentalCluster;
}
