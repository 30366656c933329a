import { ApiError } from "../../lib/errors";
import type { NodeGpu, NodeRow } from "../../4-store/nodes";
import type { RentalRow } from "../../4-store/rentals";
import { toGpuEntry, type GpuEntry, type RentableNode } from "./inventory";

// GPU rentals on a cluster (issue 45): every node offers its own GPUs, and a rental is the affair
// of the node that launched it (its `cluster_node`) — that node alone launches, probes, bills and
// stops it and serves its notebook; any other node reads it from the shared store and forwards
// what touches the notebook (create, stop, logs, the notebook proxy) to it, one hop. Which node
// that is, and what the cluster offers, is decided here from the nodes' last beats; the edge
// (src/1-api/rentals) does the forwarding. A node that died leaves its rentals unbilled from its
// last tick: no other node takes them (src/4-store/rentals.ts, claimActive's `node`), and the node
// ends them as `failed` when it starts again (ticks.ts, reconcile).

/** A GPU as a node's beat lists it (src/services.ts fills the entry's other fields; an older node's beat may lack them). */
export type ClusterGpu = NodeGpu & { compute_cap?: number; country?: string; country_code?: string };

export interface Peer {
  id: string;
  url: string;
}

export interface RentalCluster {
  /** This node's id ("local" on SQLite: one node). */
  self: string;
  /**
   * Whether other nodes share the store (PostgreSQL). Then GPU entries name their node, and a
   * rental this node held when its process died is ended, `failed`, when it starts again.
   */
  shared: boolean;
  /** The other live nodes taking new work, as of this node's last beat: their free GPUs are offered too. */
  others(): readonly Pick<NodeRow, "id" | "url" | "gpus">[];
  /** Node `id`, if it is another live node (draining too), as of the last beat. */
  peer(id: string): Peer | null;
}

/** One node on its own (SQLite, or a test's service): every rental is this node's. */
export const LOCAL_CLUSTER: RentalCluster = { self: "local", shared: false, others: () => [], peer: () => null };

/** Where a rental, or a GPU, is served: here, or on another node (`peer` null: that node is not live now). */
export type RentalHome = { here: true } | { here: false; node: string; peer: Peer | null };

const HERE: RentalHome = { here: true };

/** The node that runs rental `r`: the one that launched it (made before clusters: whichever holds it, so here). */
export function homeOfRental(r: Pick<RentalRow, "cluster_node">, c: RentalCluster): RentalHome {
  if (r.cluster_node === null || r.cluster_node === c.self) return HERE;
  return { here: false, node: r.cluster_node, peer: c.peer(r.cluster_node) };
}

/**
 * The node a rental of GPU node `gpu` is created on: this one when its inventory has it; else the
 * live node offering it; else, when it is rented, the node that runs that rental (an
 * Idempotency-Key retried at another node finds its rental there). Unknown anywhere: here, whose
 * admission answers node_not_found.
 */
export function homeOfGpu(gpu: string, local: readonly { node_id: string }[], active: readonly RentalRow[], c: RentalCluster): RentalHome {
  if (local.some((n) => n.node_id === gpu)) return HERE;
  const offering = c.others().find((n) => n.gpus.some((g) => g.node_id === gpu));
  if (offering) return { here: false, node: offering.id, peer: { id: offering.id, url: offering.url } };
  const rented = active.find((r) => r.node_id === gpu);
  return rented ? homeOfRental(rented, c) : HERE;
}

/**
 * GET /api/v1/gpus on a cluster: this node's free GPUs, then those the other live nodes offered at
 * their last beat, less any the shared store shows rented meanwhile (a beat is up to 3 s old).
 */
export function clusterGpus(localFree: readonly RentableNode[], active: readonly RentalRow[], c: RentalCluster): GpuEntry[] {
  const mark = (e: GpuEntry, node: string): GpuEntry => (c.shared ? { ...e, cluster_node: node } : e);
  const out = localFree.map((n) => mark(toGpuEntry(n), c.self));
  const seen = new Set(out.map((e) => e.node_id));
  const taken = new Set(active.map((r) => r.node_id));
  for (const node of c.others())
    for (const g of node.gpus as ClusterGpu[]) {
      if (seen.has(g.node_id) || taken.has(g.node_id)) continue;
      seen.add(g.node_id);
      out.push(
        mark(
          { node_id: g.node_id, gpu_model: g.gpu, vram_mb: g.vram_mb, compute_cap: g.compute_cap ?? 0, country: g.country ?? "", country_code: g.country_code ?? "", price_per_hour: g.price_per_hour },
          node.id,
        ),
      );
    }
  return out;
}

/** The refusal for a rental (or GPU) whose node is not live: its stop, logs and notebook wait for it to come back. */
export function nodeUnreachable(home: Extract<RentalHome, { here: false }>, what: string, detail?: string): ApiError {
  return new ApiError(
    "rental_node_unreachable",
    `${what} runs on node ${home.node}, which ${detail ?? "is not live now"}. Nothing is billed while its node is down; ` +
      "when the node starts again it ends its rentals as failed and stops their notebooks. Retry later",
    { headers: { "retry-after": "5" } },
  );
}
