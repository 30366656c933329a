import type { Principal } from "../accounts/types";
import { MAX_CLASSIFY_TOKENS } from "../../lib/bounds";
import { MAX_CLASSIFY_ITEMS, type ClassifyRequest } from "./request";
import { ApiError } from "../../lib/errors";
import type { ModelManifest } from "../../lib/manifest";
import type { ClassifierEngine, ClassifyItem } from "../../3-engines/types";
import { refuseLongText } from "../../3-engines/text-bounds";
import type { CapabilityDeps } from "../capability";

// THE classification service (spec §2.7, §4, §8): premise/hypothesis pairs through the model's
// own pair template, or raw strings as given; up to 256 items of up to 4,096 tokens each (or the
// model's own length if smaller), refused by name past that, never truncated. Billed per input
// token at the classifier price (spec §8: $0.05 per million, nothing for output).

/** The API's probability order (spec §2.7). */
export const CLASSIFY_LABELS = ["contradiction", "entailment", "neutral"] as const;

export interface ClassifyCallOptions {
  requestId: string;
  endpoint?: string;
  batch?: boolean;
  signal?: AbortSignal;
}

export interface ClassifyResponse {
  object: "list";
  model: string;
  data: { index: number; label: (typeof CLASSIFY_LABELS)[number]; probs: [number, number, number]; num_classes: 3 }[];
  usage: { prompt_tokens: number; total_tokens: number; completion_tokens: 0 };
}

export type ClassifyService = ReturnType<typeof createClassifyService>;

export function createClassifyService(deps: CapabilityDeps) {
  const { registry, meter } = deps;

  async function classify(principal: Principal, req: ClassifyRequest, opts: ClassifyCallOptions): Promise<ClassifyResponse> {
    // Held until the answer is built: a reload that removes the model unloads it only then.
    return registry.using(req.model, "classifier", (manifest, engine) => classifyWith(manifest, engine, principal, req, opts), opts.signal);
  }

  async function classifyWith(manifest: ModelManifest, engine: ClassifierEngine, principal: Principal, req: ClassifyRequest, opts: ClassifyCallOptions): Promise<ClassifyResponse> {
    const { items, field } = toItems(req);
    await engine.load();
    const limit = Math.min(MAX_CLASSIFY_TOKENS, engine.maxTokens);
    items.forEach((item, i) => refuseLongText("text" in item ? item.text.length : item.premise.length + item.hypothesis.length, limit, `${field}[${i}]`, manifest.id, "item"));
    // (stops at the first item over the limit: no work is spent on a request that is refused)
    const tokens = await engine.tokenize(items, limit);
    tokens.forEach(({ ids }, i) => {
      if (ids.length > limit)
        throw new ApiError(
          "context_length_exceeded",
          `${field}[${i}] is ${ids.length} tokens; model "${manifest.id}" takes at most ${limit} tokens per item (items are never truncated)`,
          { param: `${field}[${i}]` },
        );
    });
    const promptTokens = tokens.reduce((n, t) => n + t.ids.length, 0);
    const request = { requestId: opts.requestId, model: manifest, endpoint: opts.endpoint ?? "/v1/classify", inputTokens: promptTokens, maxOutputTokens: 0, batch: opts.batch };
    const probs = await meter.metered(principal, request, async () => ({
      result: await engine.classify(tokens, opts.signal),
      usage: { inputTokens: promptTokens, outputTokens: 0 },
    }));
    return {
      object: "list",
      model: manifest.id,
      data: probs.map((p, index) => ({ index, label: CLASSIFY_LABELS[argmax(p)]!, probs: p, num_classes: 3 })),
      usage: { prompt_tokens: promptTokens, total_tokens: promptTokens, completion_tokens: 0 },
    };
  }

  return { classify };
}

function toItems(req: ClassifyRequest): { items: ClassifyItem[]; field: "pairs" | "input" } {
  if (req.pairs && req.input) throw new ApiError("invalid_request", "send either pairs or input, not both", { param: "input" });
  const field = req.pairs ? "pairs" : "input";
  const list = req.pairs ?? req.input;
  if (!list) throw new ApiError("invalid_request", "pairs or input is required", { param: "pairs" });
  if (!list.length) throw new ApiError("invalid_request", `${field}: must not be empty`, { param: field });
  if (list.length > MAX_CLASSIFY_ITEMS)
    throw new ApiError("invalid_request", `${field}: ${list.length} items; at most ${MAX_CLASSIFY_ITEMS} per request`, { param: field });
  const items = list.map((x, i): ClassifyItem => {
    if (typeof x === "string") {
      if (!x) throw new ApiError("invalid_request", `input[${i}]: must not be empty`, { param: `input[${i}]` });
      return { text: x };
    }
    for (const k of ["premise", "hypothesis"] as const)
      if (!x[k]) throw new ApiError("invalid_request", `pairs[${i}].${k}: must not be empty`, { param: `pairs[${i}].${k}` });
    return { premise: x.premise, hypothesis: x.hypothesis };
  });
  return { items, field };
}

function argmax(p: readonly number[]): number {
  let best = 0;
  for (let i = 1; i < p.length; i++) if (p[i]! > p[best]!) best = i;
  return best;
}
