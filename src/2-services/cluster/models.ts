import type { Registry } from "../../3-engines/registry";
import type { NodeModel } from "../../4-store/nodes";

/** What this node serves, as it registers it: each model's shape and its residency now. */
export function nodeModels(registry: Pick<Registry, "list" | "status">): NodeModel[] {
  const status = new Map(registry.status().map((s) => [s.id, s]));
  return registry.list().map((m) => {
    const s = status.get(m.id);
    return {
      id: m.id,
      kind: m.kind,
      max_context: m.max_context,
      vision: m.supports_vision === true,
      loaded: s?.state === "loaded",
      in_flight: s?.in_flight ?? 0,
      slots: s?.slots ?? null,
    };
  });
}
