import { Elysia } from "elysia";
import type { ModelEntry, Registry } from "../../3-engines/registry";
import { contextOf } from "../http/context";
import { clusterEntries } from "../../2-services/cluster/models";
import type { NodeRow } from "../../4-store/nodes";

/** The other live nodes of this one's cluster (none on SQLite). */
export interface ClusterView {
  id: string;
  others(): readonly NodeRow[];
}
const NONE: readonly NodeRow[] = [];

// GET /v1/models (spec §2.1) in OpenAI's list envelope, each entry also carrying `kind`, and
// GET /v1/models/{id} for the SDKs' `models.retrieve`. Ids may contain "/". An Anthropic client
// (it sends `anthropic-version`) gets Anthropic's shapes instead: coding agents list models there.
export function modelsRoutes(registry: Registry, cluster?: ClusterView, pricing?: (id: string) => Record<string, number> | undefined) {
  const others = () => cluster?.others() ?? NONE;
  /** This node's entries with their prices (read per list: [prices] reload in place). */
  const priced = (entries: readonly ModelEntry[]) => (pricing ? entries.map((e) => ({ ...e, pricing: pricing(e.id) ?? e.pricing })) : entries);
  // The lists are serialised once per served set: a reload that adds or removes a model gives
  // list() a new array, and the next request serialises that.
  const json = (body: unknown) => new Response(body as string, { headers: { "content-type": "application/json" } });
  let cached: { of: readonly ModelEntry[]; others: readonly NodeRow[]; prices: string; openai: string; anthropic: string } | null = null;
  const lists = () => {
    const local = registry.list();
    const remote = others();
    const prices = JSON.stringify(local.map((e) => pricing?.(e.id)));
    if (cached?.of !== local || cached.others !== remote || cached.prices !== prices) {
      // On a cluster: every live node's models (src/2-services/cluster/models.ts), the same list on each.
      const entries = clusterEntries(cluster?.id ?? "", priced(local), remote);
      const anthropicEntries = entries.map(toAnthropic);
      cached = {
        of: local,
        others: remote,
        prices,
        openai: JSON.stringify({ object: "list", data: entries }),
        anthropic: JSON.stringify({
          data: anthropicEntries,
          has_more: false,
          first_id: anthropicEntries[0]?.id ?? null,
          last_id: anthropicEntries.at(-1)?.id ?? null,
        }),
      };
    }
    return cached;
  };
  return new Elysia({ name: "openai-models" })
    .get("/v1/models", ({ request }) => json(contextOf(request).format === "anthropic" ? lists().anthropic : lists().openai))
    .get("/v1/models/*", ({ params, request }) => {
      const id = params["*"]; // decoded by the edge (src/app.ts)
      const elsewhere = registry.list().some((m) => m.id === id) ? undefined : clusterEntries(cluster?.id ?? "", [], others()).find((m) => m.id === id);
      const entry = elsewhere ?? priced([registry.entry(id)])[0]!;
      return contextOf(request).format === "anthropic" ? toAnthropic(entry) : entry;
    });
}

/** Anthropic's ModelInfo for one of our entries. */
function toAnthropic(m: ModelEntry) {
  return {
    type: "model" as const,
    id: m.id,
    display_name: m.name,
    created_at: new Date(m.created * 1000).toISOString(),
    max_input_tokens: m.max_context,
    max_tokens: m.max_context,
    lifecycle: "active" as const,
    deprecated_at: null,
    retires_at: null,
    capabilities: null,
    line: null,
    kind: m.kind,
    ...(m.supports_vision ? { supports_vision: true } : {}),
  };
}
