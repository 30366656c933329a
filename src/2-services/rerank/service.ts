import type { Principal } from "../accounts/types";
import { ApiError } from "../../lib/errors";
import type { ModelManifest } from "../../lib/manifest";
import { RerankQueryTooLong, type RerankerEngine } from "../../3-engines/types";
import type { CapabilityDeps } from "../capability";
import type { LedgerEffect } from "../../4-store/ledger";
import { MAX_RERANK_DOCUMENTS, type RerankRequest } from "./request";

// THE rerank service (issue 47): each document paired with the query through a cross-encoder
// (RerankerEngine), relevance in [0, 1], results best first. A pair longer than the model takes
// (or than max_tokens_per_doc allows) is cut from the document's end: never silently, each cut is
// listed in `meta.truncated` and warned of in `meta.warnings`, and usage counts the tokens the
// model read. Billed per input token at the reranker price (prices.reranker_input_per_m, or the
// model's own price.input_per_m), nothing for output.

export interface RerankCallOptions {
  requestId: string;
  endpoint?: string;
  batch?: boolean;
  signal?: AbortSignal;
  /** What commits with the charge, in one transaction (batch lines record their result this way). */
  record?: (response: RerankResponse) => LedgerEffect;
}

export interface RerankResult {
  index: number;
  relevance_score: number;
  document?: { text: string };
}

export interface RerankResponse {
  id: string;
  model: string;
  results: RerankResult[];
  usage: { prompt_tokens: number; total_tokens: number };
  meta: {
    api_version: { version: "2" };
    billed_units: { input_tokens: number };
    tokens: { input_tokens: number; output_tokens: 0 };
    /** Tokens of each pair this model reads at most (query, document and special tokens). */
    max_tokens_per_pair: number;
    /** Documents cut from their end to fit, and by how many tokens. */
    truncated: { index: number; cut_tokens: number }[];
    warnings?: string[];
  };
}

export type RerankService = ReturnType<typeof createRerankService>;

export function createRerankService(deps: CapabilityDeps) {
  const { registry, meter } = deps;

  async function rerank(principal: Principal, req: RerankRequest, opts: RerankCallOptions): Promise<RerankResponse> {
    const texts = documentsOf(req);
    // Held until the answer is built: a reload that removes the model unloads it only then.
    return registry.using(req.model, "reranker", (manifest, engine) => rerankWith(manifest, engine, principal, req, texts, opts), opts.signal);
  }

  async function rerankWith(manifest: ModelManifest, engine: RerankerEngine, principal: Principal, req: RerankRequest, texts: string[], opts: RerankCallOptions): Promise<RerankResponse> {
    await engine.load();
    let limit = engine.maxTokens;
    const perDoc = req.max_tokens_per_doc ?? null;
    if (perDoc !== null) {
      // A pair with an empty document is the query and the template's special tokens.
      const [bare] = await pairs(engine, req.query, [""], Infinity);
      limit = Math.min(limit, bare!.ids.length + perDoc);
    }
    const tokenized = await pairs(engine, req.query, texts, limit);
    const inputTokens = tokenized.reduce((n, p) => n + p.ids.length, 0);
    const truncated = tokenized.flatMap((p, index) => (p.cut > 0 ? [{ index, cut_tokens: p.cut }] : []));
    const request = { requestId: opts.requestId, model: manifest, endpoint: opts.endpoint ?? "/v1/rerank", inputTokens, maxOutputTokens: 0, batch: opts.batch };
    return meter.metered(principal, request, async () => {
      const scores = await engine.rerank(tokenized, opts.signal);
      const order = scores.map((score, index) => ({ index, score })).sort((a, b) => b.score - a.score || a.index - b.index);
      const top = req.top_n == null ? order : order.slice(0, req.top_n);
      const result: RerankResponse = {
        id: opts.requestId,
        model: manifest.id,
        results: top.map(({ index, score }) => ({ index, relevance_score: score, ...(req.return_documents ? { document: { text: texts[index]! } } : {}) })),
        usage: { prompt_tokens: inputTokens, total_tokens: inputTokens },
        meta: {
          api_version: { version: "2" },
          billed_units: { input_tokens: inputTokens },
          tokens: { input_tokens: inputTokens, output_tokens: 0 },
          max_tokens_per_pair: limit,
          truncated,
          ...(truncated.length ? { warnings: [cutWarning(truncated, limit, perDoc)] } : {}),
        },
      };
      deps.judged?.("/v1/rerank", manifest.id, texts.length, inputTokens);
      return { result, usage: { inputTokens, outputTokens: 0 }, effect: opts.record?.(result) };
    });
  }

  return { rerank };
}

/** The pairs, a query too long for any document a named 400. */
async function pairs(engine: RerankerEngine, query: string, texts: string[], limit: number) {
  try {
    return await engine.tokenizePairs(query, texts, limit);
  } catch (e) {
    if (e instanceof RerankQueryTooLong)
      throw new ApiError(
        "context_length_exceeded",
        `query: ${e.queryTokens} tokens with the pair's special tokens; model "${engine.modelId}" reads at most ${e.maxTokens} tokens per (query, document) pair, which leaves no room for a document (the query is never cut)`,
        { param: "query" },
      );
    throw e;
  }
}

function cutWarning(truncated: { index: number; cut_tokens: number }[], limit: number, perDoc: number | null): string {
  const which = truncated.length <= 5 ? truncated.map((t) => t.index).join(", ") : `${truncated.slice(0, 5).map((t) => t.index).join(", ")} and ${truncated.length - 5} more`;
  const why = perDoc !== null ? `to ${perDoc} tokens (max_tokens_per_doc) or ` : "";
  return `${truncated.length} document(s) (index ${which}) were cut from their end ${why}so each pair fits ${limit} tokens; their scores read only the kept part (meta.truncated lists each)`;
}

/** The documents' texts; the list's size and every document checked. */
function documentsOf(req: RerankRequest): string[] {
  if (!req.query) throw new ApiError("invalid_request", "query: must not be empty", { param: "query" });
  if (!req.documents.length) throw new ApiError("invalid_request", "documents: give at least one document", { param: "documents" });
  if (req.documents.length > MAX_RERANK_DOCUMENTS)
    throw new ApiError("too_many_documents", `documents: ${req.documents.length} documents; at most ${MAX_RERANK_DOCUMENTS} per request (split the list and merge the scores: they are comparable across requests)`, {
      param: "documents",
    });
  if (req.rank_fields && (req.rank_fields.length !== 1 || req.rank_fields[0] !== "text"))
    throw new ApiError("invalid_request", `rank_fields: only ["text"] is supported (each document's text is ranked)`, { param: "rank_fields" });
  return req.documents.map((d) => (typeof d === "string" ? d : d.text));
}
