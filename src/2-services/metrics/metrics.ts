import { MetricsRegistry } from "./registry";

// The metrics the running process counts as work happens: HTTP requests (recorded by the edge in
// app.ts) and chat generations (recorded by the chat service). What is read at scrape time —
// slots, batches, rentals, credits — is in collect.ts. Every label value here is bounded: route
// patterns (never raw paths), a fixed set of methods, status codes, and model ids from the config.

const HTTP_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
const TTFT_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
const TPOT_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1];

const METHODS = new Set(["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]);

/** What a finished generation reports (EngineResult's counts). */
export interface ChatCounts {
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
}

/** Times one chat generation: `token()` on every engine event, `done()` once it has finished. */
export interface ChatTimer {
  token(): void;
  done(counts: ChatCounts): void;
}

export type Metrics = ReturnType<typeof createMetrics>;

/** What came of one hop to another node (src/1-api/cluster/forward.ts). */
export type ForwardOutcome = "answered" | "unreachable" | "not_serving" | "broken";

/** `chatModels`: configured chat model ids, whose token counters start at 0 (so `increase()` sees the first request). */
export function createMetrics(opts: { chatModels?: readonly string[] } = {}) {
  const registry = new MetricsRegistry();
  const requests = registry.counter(
    "appliance_http_requests_total",
    "HTTP requests answered, by matched route pattern (\"unmatched\" when no route matched), method and status.",
    ["route", "method", "status"],
  );
  const duration = registry.histogram(
    "appliance_http_request_duration_seconds",
    "Time from a request's arrival to its response; for a stream, to the response's start.",
    ["route", "method"],
    HTTP_BUCKETS,
  );
  const tokens = registry.counter("appliance_chat_tokens_total", "Chat tokens processed: prompt (input) and generated (output).", [
    "model",
    "direction",
  ]);
  const cached = registry.counter(
    "appliance_chat_cached_tokens_total",
    "Prompt tokens a slot already held (prefix reuse); divide by input tokens for the cache-reuse ratio.",
    ["model"],
  );
  const ttft = registry.histogram(
    "appliance_chat_time_to_first_token_seconds",
    "Live chat requests: from the chat service taking the request (slot wait and prompt included) to the first generated token.",
    ["model"],
    TTFT_BUCKETS,
  );
  const tpot = registry.histogram(
    "appliance_chat_time_per_output_token_seconds",
    "Live chat requests with two or more output tokens: (end - first token) / (output tokens - 1), one observation per request.",
    ["model"],
    TPOT_BUCKETS,
  );
  const forwards = registry.counter(
    "appliance_cluster_forwards_total",
    "Requests this node sent one hop to another node of its cluster, by that node and what came of it: answered (its answer passed on), unreachable or not_serving (the next node tried), broken (cut off after it started).",
    ["to", "outcome"],
  );
  const judged = registry.counter(
    "appliance_judged_items_total",
    "Items judged without generating text: /v1/decisions questions answered and /v1/rerank documents scored, by endpoint and model.",
    ["endpoint", "model"],
  );
  const judgedTokens = registry.counter(
    "appliance_judged_input_tokens_total",
    "Input tokens read by /v1/decisions and /v1/rerank (what they bill), by endpoint and model.",
    ["endpoint", "model"],
  );
  const chatModel = (model: string) => {
    tokens.inc({ model, direction: "input" }, 0);
    tokens.inc({ model, direction: "output" }, 0);
    cached.inc({ model }, 0);
  };
  for (const model of opts.chatModels ?? []) chatModel(model);

  return {
    registry,
    /** A chat model a config reload added: its token counters start at 0, as the configured ones' do. */
    chatModel,
    /** One answered /v1/decisions (`items`: its questions) or /v1/rerank (`items`: its documents) request. */
    judged(endpoint: "/v1/decisions" | "/v1/rerank", model: string, items: number, inputTokens: number): void {
      judged.inc({ endpoint, model }, items);
      judgedTokens.inc({ endpoint, model }, inputTokens);
    },
    /** One hop to node `to` of the cluster and its outcome. */
    clusterForward(to: string, outcome: ForwardOutcome): void {
      forwards.inc({ to, outcome });
    },
    /** One answered request. `route` is the matched pattern or "unmatched"; never a raw path. */
    httpRequest(route: string, method: string, status: number, seconds: number): void {
      const m = METHODS.has(method) ? method : "other";
      requests.inc({ route, method: m, status });
      duration.observe({ route, method: m }, seconds);
    },
    /**
     * Starts timing a generation of `model` (a configured id). Batch lines count their tokens but
     * stay out of the latency histograms: they wait for a slot behind live work by design.
     */
    chatRun(model: string, opts: { batch?: boolean } = {}): ChatTimer {
      const live = opts.batch !== true;
      const start = performance.now();
      let first: number | null = null;
      const token = () => {
        if (first !== null) return;
        first = performance.now();
        if (live) ttft.observe({ model }, (first - start) / 1000);
      };
      return {
        token,
        done(c) {
          const end = performance.now();
          if (c.completionTokens > 0) token();
          tokens.inc({ model, direction: "input" }, c.promptTokens);
          tokens.inc({ model, direction: "output" }, c.completionTokens);
          cached.inc({ model }, c.cachedTokens);
          if (live && first !== null && c.completionTokens > 1) tpot.observe({ model }, (end - first) / 1000 / (c.completionTokens - 1));
        },
      };
    },
  };
}
