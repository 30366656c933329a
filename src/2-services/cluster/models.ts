import type { ModelEntry, Registry } from "../../3-engines/registry";
import type { ModelKind } from "../../lib/manifest";
import type { NodeModel, NodeRow } from "../../4-store/nodes";

/** What this node serves, as it registers it: each model's shape and its residency now. */
export function nodeModels(registry: Pick<Registry, "list" | "status">, pricing?: (id: string) => Record<string, number> | undefined): NodeModel[] {
  const status = new Map(registry.status().map((s) => [s.id, s]));
  return registry.list().map((m) => {
    const s = status.get(m.id);
    const price = pricing?.(m.id);
    return {
      id: m.id,
      name: m.name,
      created: m.created,
      kind: m.kind,
      max_context: m.max_context,
      vision: m.supports_vision === true,
      loaded: s?.state === "loaded",
      in_flight: s?.in_flight ?? 0,
      slots: s?.slots ?? null,
      ...(price ? { pricing: price } : {}),
    };
  });
}

/** A model another node serves, as its /v1/models entry. */
export function entryOf(m: NodeModel): ModelEntry {
  return {
    id: m.id,
    object: "model",
    created: m.created,
    owned_by: "appliance",
    name: m.name,
    kind: m.kind as ModelKind,
    max_context: m.max_context,
    ...(m.vision ? { supports_vision: true as const } : {}),
    ...(m.pricing ? { pricing: m.pricing } : {}),
  };
}

/**
 * The cluster's models, the same list on every node: each live node's in the order of their ids,
 * a model several nodes serve listed once (as the first of them has it). This node's own are
 * `local` (live); the others' as of their last beat. With no other node, `local` as it is.
 */
export function clusterEntries(self: string, local: readonly ModelEntry[], others: readonly Pick<NodeRow, "id" | "models">[]): readonly ModelEntry[] {
  if (others.length === 0) return local;
  const nodes = [{ id: self, entries: local }, ...others.map((n) => ({ id: n.id, entries: n.models.map(entryOf) }))].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  const seen = new Set<string>();
  const out: ModelEntry[] = [];
  for (const n of nodes)
    for (const e of n.entries)
      if (!seen.has(e.id)) {
        seen.add(e.id);
        out.push(e);
      }
  return out;
}
