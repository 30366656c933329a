// The nodes of a cluster (issue 45): appliance processes on one PostgreSQL store (pg/nodes.ts;
// migration 020). A SQLite store is one node and keeps no such table.

/** What a node serves, as other nodes and `appliance nodes` see it. */
export interface NodeModel {
  id: string;
  /** Its display name and creation time, as its /v1/models entry shows them. */
  name: string;
  created: number;
  kind: string;
  max_context: number;
  vision: boolean;
  loaded: boolean;
  in_flight: number;
  slots: number | null;
  /** Its price as /v1/models shows it (USD; src/2-services/billing/pricing.ts pricingOf). */
  pricing?: Record<string, number>;
}

/** A rentable GPU node this node launches rentals on. */
export interface NodeGpu {
  node_id: string;
  gpu: string;
  count: number;
  vram_mb: number;
  price_per_hour: number;
}

export interface NodeInfo {
  id: string;
  url: string;
  version: string;
  startedAt: number;
  models: NodeModel[];
  gpus: NodeGpu[];
  /** The settings every node of a cluster must share (prices, limits), as plain JSON. */
  settings: Record<string, unknown>;
}

export interface NodeRow extends NodeInfo {
  heartbeatAt: number;
  /** How long ago it beat, by the database's clock. */
  ageMs: number;
  draining: boolean;
}

export interface NodeStore {
  /** Registers the node (or the same node again after a restart: its draining flag stays). */
  register(node: NodeInfo): Promise<void>;
  /** One beat with what the node serves now; null when its row is gone (registered again then). */
  beat(id: string, now: { models: NodeModel[]; gpus: NodeGpu[] }): Promise<{ draining: boolean } | null>;
  list(): Promise<NodeRow[]>;
  /** false: no such node. */
  setDraining(id: string, draining: boolean): Promise<boolean>;
}
