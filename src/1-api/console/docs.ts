import { ApiError } from "../../lib/errors";
import { renderDoc, type RenderedDoc } from "./markdown";
// The manual: every page of web/docs/, imported as text so the compiled executable carries it (a
// test checks that every page there is listed here). Rendered once, on first request.
import api from "../../../web/docs/api.md" with { type: "text" };
import apiBatches from "../../../web/docs/api-batches.md" with { type: "text" };
import apiCapabilities from "../../../web/docs/api-capabilities.md" with { type: "text" };
import apiChat from "../../../web/docs/api-chat.md" with { type: "text" };
import architecture from "../../../web/docs/architecture.md" with { type: "text" };
import benchmarks from "../../../web/docs/benchmarks.md" with { type: "text" };
import clients from "../../../web/docs/clients.md" with { type: "text" };
import configuration from "../../../web/docs/configuration.md" with { type: "text" };
import development from "../../../web/docs/development.md" with { type: "text" };
import gpu from "../../../web/docs/gpu.md" with { type: "text" };
import https from "../../../web/docs/https.md" with { type: "text" };
import index from "../../../web/docs/index.md" with { type: "text" };
import limits from "../../../web/docs/limits.md" with { type: "text" };
import models from "../../../web/docs/models.md" with { type: "text" };
import operations from "../../../web/docs/operations.md" with { type: "text" };
import postgresql from "../../../web/docs/postgresql.md" with { type: "text" };
import cluster from "../../../web/docs/cluster.md" with { type: "text" };
import rentals from "../../../web/docs/rentals.md" with { type: "text" };
import threads from "../../../web/docs/threads.md" with { type: "text" };

/** Page name (its file name without .md) → its Markdown; listed in this order, the contents first. */
const PAGES: Record<string, string> = {
  "index": index,
  "api": api,
  "api-chat": apiChat,
  "api-capabilities": apiCapabilities,
  "api-batches": apiBatches,
  "threads": threads,
  "limits": limits,
  "configuration": configuration,
  "models": models,
  "gpu": gpu,
  "https": https,
  "rentals": rentals,
  "clients": clients,
  "postgresql": postgresql,
  "cluster": cluster,
  "operations": operations,
  "architecture": architecture,
  "benchmarks": benchmarks,
  "development": development,
};

export const DOC_PAGES = Object.keys(PAGES);
const names = new Set(DOC_PAGES);
const rendered = new Map<string, RenderedDoc>();

function rendering(name: string): RenderedDoc {
  let doc = rendered.get(name);
  if (!doc) rendered.set(name, (doc = renderDoc(PAGES[name]!, name, names)));
  return doc;
}

/** The pages, in the contents' order, with their titles (each page's first heading). */
export function docList() {
  return { object: "list", data: DOC_PAGES.map((name) => ({ name, title: rendering(name).title })) };
}

/** One page as the console builds it; 404 for a name that is no page. */
export function docPage(name: string) {
  if (!Object.hasOwn(PAGES, name)) throw new ApiError("not_found", `the manual has no page "${name}"; GET /console/api/docs lists them`);
  const { title, tree } = rendering(name);
  return { name, title, tree };
}
