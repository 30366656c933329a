import { Elysia } from "elysia";
import { healthRoutes } from "./1-api/health";
import { accessOf, authenticateRequest, requiredScope, requireScope } from "./1-api/http/auth";
import { consoleRoutes } from "./1-api/console/routes";
import { consoleAdminModelsRoutes } from "./1-api/console/admin-models";
import { conversationRoutes } from "./1-api/console/conversations";
import { consoleInferenceRoutes } from "./1-api/console/inference";
import { assertAllowedHost } from "./1-api/console/session";
import { bindContext, clientOf, contextOf, pathAndQueryOf, pathOf, routableRequest, type RequestContext } from "./1-api/http/context";
import { forwardToPeers } from "./1-api/cluster/forward";
import { bodyHashOf, HOP_HEADER } from "./2-services/cluster/hop";
import { admitBody, bodyTooLarge } from "./1-api/http/body";
import { bodyErrorOf } from "./1-api/http/body-check";
import { ApiError, asApiError, formatFor, renderError } from "./1-api/http/errors";
import { validationToApiError } from "./1-api/http/validation";
import { messagesRoutes } from "./1-api/anthropic/routes";
import { batchLanes } from "./1-api/batch-lanes";
import { batchesRoutes } from "./1-api/openai/batches";
import { chatRoutes } from "./1-api/openai/chat";
import { classifyRoutes } from "./1-api/openai/classify";
import { decisionRoutes } from "./1-api/openai/decisions";
import { rerankRoutes } from "./1-api/openai/rerank";
import { embeddingsRoutes } from "./1-api/openai/embeddings";
import { filesRoutes } from "./1-api/openai/files";
import { rentalsRoutes } from "./1-api/rentals/routes";
import { rentalProxyRoutes } from "./1-api/rentals/proxy";
import { imagesRoutes } from "./1-api/openai/images";
import { responsesRoutes } from "./1-api/responses/routes";
import { modelsRoutes } from "./1-api/openai/models";
import { metricsRoutes } from "./1-api/metrics";
import { adminModelsRoutes } from "./1-api/admin/models";
import { buildOpenApi, type OpenApiDocument } from "./1-api/openapi/document";
import { openapiRoutes } from "./1-api/openapi/routes";
import { newId } from "./lib/ids";
import { parseClientJson } from "./lib/bounded-json";
import type { AppDeps } from "./services";

export interface App {
  /** Serves one request without any socket: main.ts passes it to Bun.serve, tests call it directly. */
  handle(req: Request): Promise<Response>;
}

/**
 * Composes the edge (request id, auth, limits, errors, logs) and the route plugins. Never listens.
 * Auth runs on the route the router matched and before Elysia parses anything (the first hook of
 * every route: parse for requests with a body, transform for the rest), so a bad key is a 401
 * whatever the body holds, and `/openapi.json/` is authenticated as `/openapi.json` is.
 */
export function createApp(deps: AppDeps): App {
  const { accounts, limits, logger, metrics } = deps;
  // The batch worker checks and runs lines as the live routes do: the edge gives it their lanes.
  deps.batchWorker.useLanes(batchLanes({ chat: deps.chat, embeddings: deps.embeddings, decisions: deps.decisions, rerank: deps.rerank, compat: () => deps.config.compat }));
  const maxBodyBytes = maxBodyBytesOf(deps.config);
  const servedBy = deps.node.secret ? deps.node.id : null;

  /** Auth, scope, rate limits and the announced body size of a matched route; runs once a request. */
  async function admit(request: Request, route: string): Promise<void> {
    const rc = contextOf(request);
    if (rc.admitted) return;
    rc.admitted = true;
    rc.route = route;
    rc.format = formatFor(route, request.headers);
    // A hop from another node of the cluster: served under the request id it names, never forwarded again.
    const hop = request.headers.get(HOP_HEADER);
    if (hop !== null) {
      const check = deps.node.takeHop(hop, request.method, pathAndQueryOf(request.url));
      if (!check.ok) throw new ApiError("hop_refused", `refused a request forwarded by another node: ${check.reason}`);
      rc.hop = check.hop;
      rc.id = check.hop.requestId;
    }
    // The console's routes answer only to a Host this machine answers to (DNS rebinding), whichever plugin holds them.
    if (route === "/" || route === "/console" || route.startsWith("/console/")) assertAllowedHost(deps.console.auth, request);
    const access = accessOf(route);
    if (access.key) {
      // A console session's request (its route set who it acts as), a hop from a node that served
      // one (the hop names the key, signed), or a client's own key.
      if (rc.sessionPrincipal) rc.principal = rc.sessionPrincipal;
      else if (rc.hop?.keyId) rc.principal = await hopPrincipal(rc.hop.keyId);
      else rc.principal = await authenticateRequest(accounts, request.headers, route);
      if (access.scope) {
        // Work (not /metrics or the admin API): a node that takes none sends it elsewhere. A
        // draining node still reads and ends what it has (a rental it runs is stopped only by it).
        const node = deps.node.status();
        if (!node.accepting && !(node.reason === "draining" && !isNewWork(request.method, route)))
          throw new ApiError("node_not_serving", `this node takes no new work (${node.reason === "draining" ? "it is draining" : "its beats do not reach the cluster's store"}); retry on another node`, {
            headers: { "retry-after": "1" },
          });
        requireScope(rc.principal, access.scope);
        // A request is counted by the node the client sent it to: a hop from another node was counted there.
        if (!rc.hop) rc.headers = await limits.request(rc.principal);
      }
    }
    const length = Number(request.headers.get("content-length") ?? 0);
    if (length > maxBodyBytes) throw bodyTooLarge(maxBodyBytes, length);
  }

  /** The key a hop from a console session names: active, or the request is refused as a bad key would be. */
  async function hopPrincipal(keyId: string) {
    const p = await accounts.activePrincipalById(keyId);
    if (!p) throw new ApiError("invalid_api_key", "Invalid API key");
    return p;
  }

  const routes = new Elysia()
    .onParse({ as: "global" }, async ({ request, route }, contentType) => {
      const json = /^application\/(?:[\w.+-]*\+)?json\b/i.test(contentType);
      // A model this node does not serve may be served by another node: decided once the body is read.
      const mayForward = json && FORWARDABLE.has(route) && !request.headers.has(HOP_HEADER) && deps.node.others().length > 0;
      await admit(request, route);
      // The rental proxy forwards a body as it came (src/1-api/rentals/proxy.ts): nothing reads it here.
      if (route === "/rentals/:id" || route === "/rentals/:id/*") return null;
      // JSON bodies are parsed here, with their nesting and size bounded first (src/lib/bounded-json.ts);
      // other types fall through to Elysia's parsers.
      if (json) {
        const text = await request.text();
        const rc = contextOf(request);
        if (rc.hop?.bodyHash && bodyHashOf(text) !== rc.hop.bodyHash) throw new ApiError("hop_refused", "refused a request forwarded by another node: its body is not the one the hop was signed for");
        const body = parseClientJson(text, "request body");
        const forwarded = mayForward ? await forwardElsewhere(request, route, text, body) : null;
        if (forwarded) throw new Forwarded(forwarded);
        return body;
      }
    })
    .onTransform({ as: "global" }, async ({ request, route, params }) => {
      await admit(request, route);
      decodeParams(params as Record<string, string | null>);
    })
    .onError({ as: "global" }, async ({ code, error, request, body, route, set }) => {
      const rc = contextOf(request);
      // Another node's answer (onParse): passed on as it is (Elysia would give it the error's status).
      const forwarded = error instanceof Forwarded ? error : (error as Error | undefined)?.cause instanceof Forwarded ? ((error as Error).cause as Forwarded) : null;
      if (forwarded) {
        set.status = forwarded.response.status;
        return forwarded.response;
      }
      // A failed body whose value broke Elysia's own error message (body-check.ts): the field's 400.
      const invalid = code === "UNKNOWN" && error instanceof TypeError ? bodyError(request.method, route, body) : null;
      return errorResponse(rc, invalid ?? (code === "NOT_FOUND" ? await notFound(request) : toApiError(code, error, request)));
    })
    .use(healthRoutes(deps))
    .use(metricsRoutes(deps))
    .use(adminModelsRoutes(deps))
    .use(modelsRoutes(deps.registry, deps.node, deps.pricing))
    .use(chatRoutes(deps.chat, logger))
    .use(responsesRoutes(deps.chat, logger, () => deps.config.compat))
    .use(
      messagesRoutes(deps.chat, logger, () => deps.config.compat, {
        store: deps.threads,
        clock: deps.clock,
        logger,
        settings: () => deps.config.threads,
        maxBodyBytes: deps.config.server.max_body_mb * 1024 * 1024,
      }),
    )
    .use(embeddingsRoutes(deps))
    .use(classifyRoutes(deps))
    .use(decisionRoutes(deps))
    .use(rerankRoutes(deps))
    .use(imagesRoutes(deps))
    .use(filesRoutes(deps.files))
    .use(batchesRoutes(deps.batches))
    // On a cluster, what touches another node's rental goes to that node (src/1-api/rentals/elsewhere.ts).
    .use(rentalsRoutes(deps.rentals, { node: deps.node, logger }))
    .use(rentalProxyRoutes(deps.rentals, deps.config.rentals.notebook_sources, { node: deps.node, logger }))
    .use(consoleRoutes(deps.console.auth, deps.console.views, clientOf))
    .use(consoleAdminModelsRoutes(deps.console.auth, deps.console.pulls))
    .use(conversationRoutes(deps.console.auth, deps.console.conversations))
    // The console's chat and tools: the inference API as the signed-in account (console/inference.ts).
    .use(consoleInferenceRoutes(deps.console.auth, accounts, (req, principal, id) => serve(req, { sessionPrincipal: principal, id })))
    // The document is built from this very route table (TypeBox schemas included) on first use.
    .use(openapiRoutes((): OpenApiDocument => buildOpenApi(routes)));

  const bodyError = bodyErrorOf(routes.routes);

  /** Sends the request to another node when this one does not serve its model and a live one does (src/1-api/cluster/forward.ts). */
  async function forwardElsewhere(request: Request, route: string, text: string, body: unknown): Promise<Response | null> {
    const model = body && typeof body === "object" && !Array.isArray(body) ? (body as { model?: unknown }).model : undefined;
    if (typeof model !== "string" || deps.registry.list().some((m) => m.id === model)) return null;
    const peers = deps.node.peersFor(model);
    if (peers.length === 0) return null;
    const rc = contextOf(request);
    return forwardToPeers(peers, {
      self: deps.node.id,
      secret: deps.node.secret,
      requestId: rc.id,
      keyId: rc.sessionPrincipal?.keyId ?? null,
      method: request.method,
      path: pathAndQueryOf(request.url),
      route,
      headers: request.headers,
      body: text,
      signal: request.signal,
      logger,
      count: (to, outcome) => metrics.clusterForward(to, outcome),
      open: (to) => deps.node.sent(to),
    });
  }

  function toApiError(code: string | number, error: unknown, request: Request): ApiError {
    // A chunked body that ran past the limit, whoever was reading it (a parser, the files upload).
    if (contextOf(request).bodyTooLarge) return bodyTooLarge(maxBodyBytes);
    if (error instanceof ApiError) return error;
    // Elysia wraps what its parse hooks throw (the edge's auth and JSON bounds among them).
    if (code === "PARSE" && (error as Error).cause instanceof ApiError) return (error as Error).cause as ApiError;
    if (code === "VALIDATION") return validationToApiError(error);
    if (code === "PARSE") return new ApiError("invalid_json", "request body is not valid JSON");
    // The client is gone (it disconnected, or shutdown cut it): whatever failed because of that is no server error.
    if (request.signal.aborted) return new ApiError("request_cancelled", "the request was cancelled before it was answered");
    return unexpected(contextOf(request), error);
  }

  /** No route matched: under the API's prefixes a missing or bad key is still a 401, so paths cannot be probed. */
  async function notFound(request: Request): Promise<ApiError> {
    const path = pathOf(request.url);
    if (requiredScope(path)) {
      try {
        await authenticateRequest(accounts, request.headers, path);
      } catch (e) {
        return e as ApiError;
      }
    }
    return new ApiError("not_found", `Invalid URL (${request.method} ${path})`);
  }

  function unexpected(rc: RequestContext, error: unknown): ApiError {
    const { error: apiError } = asApiError(error, rc.id);
    logger.error("unhandled error", {
      request_id: rc.id,
      route: rc.route,
      error: error instanceof Error ? error.message : String(error),
      stack: error instanceof Error ? error.stack : undefined,
    });
    return apiError;
  }

  function errorResponse(rc: RequestContext, err: ApiError): Response {
    return renderError(err, rc.format);
  }

  /** Serves one request; `preset`: what the app itself decided of a request it made (a console session's). */
  async function serve(req: Request, preset: Partial<Pick<RequestContext, "id" | "sessionPrincipal">> = {}): Promise<Response> {
    const path = pathOf(req.url);
    const rc: RequestContext = {
      id: newId("req_"),
      start: performance.now(),
      path,
      format: formatFor(path, req.headers),
      principal: null,
      route: "unmatched",
      headers: {},
    };
    if (preset.id) rc.id = preset.id;
    if (preset.sessionPrincipal) rc.sessionPrincipal = preset.sessionPrincipal;
    // Over HTTPS the console's pages tell browsers to stay on HTTPS (a year, as is usual).
    if (req.url.startsWith("https:") && (path === "/" || path === "/console" || path.startsWith("/console/"))) rc.headers["strict-transport-security"] = "max-age=31536000";
    bindContext(req, rc);
    let res: Response;
    try {
      // Routed on its real path whatever its Host (context.ts, routableUrl).
      res = await routes.handle(admitBody(routableRequest(req), rc, maxBodyBytes));
    } catch (e) {
      res = errorResponse(rc, e instanceof ApiError ? e : unexpected(rc, e));
    }
    res = withHeaders(res, rc, servedBy);
    metrics.httpRequest(rc.route, req.method, res.status, (performance.now() - rc.start) / 1000);
    logger.info("request", {
      request_id: rc.id,
      method: req.method,
      route: rc.route,
      status: res.status,
      duration_ms: Math.round((performance.now() - rc.start) * 1000) / 1000,
      key: rc.principal?.display ?? null,
    });
    return res;
  }

  return { handle: (req: Request) => serve(req) };
}

/** Names the node of a cluster that served a request (debugging a cluster behind a load balancer). */
export const NODE_HEADER = "x-appliance-node";

/** The routes whose model another node of the cluster may serve: their JSON body names it. */
const FORWARDABLE = new Set(["/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/messages/count_tokens", "/v1/embeddings", "/v1/classify", "/v1/decisions", "/v1/rerank", "/v2/rerank", "/v1/images/generations"]);

/** Whether a request starts work (a draining node refuses it) rather than reading or ending some (GET, DELETE, a cancel). */
export function isNewWork(method: string, route: string): boolean {
  if (method === "GET" || method === "HEAD" || method === "DELETE") return false;
  return !(method === "POST" && route.endsWith("/cancel"));
}

/** Another node's answer to a forwarded request, carried out of the parse hook to the error hook, which returns it. */
class Forwarded extends Error {
  constructor(readonly response: Response) {
    super("forwarded to another node");
  }
}

/**
 * Path parameters decoded alike: Elysia decodes named ones (null where a percent-escape is
 * malformed, `/v1/models/%ff`) but hands a wildcard over raw. A malformed one is a 400 naming it.
 */
function decodeParams(params: Record<string, string | null>): void {
  for (const name in params) {
    let value = params[name];
    if (name === "*" && value !== null) {
      try {
        value = params[name] = decodeURIComponent(value!);
      } catch {
        value = null;
      }
    }
    if (value === null) throw new ApiError("invalid_request", `the path's ${name === "*" ? "id" : name} has a malformed percent-escape`, { param: name === "*" ? "id" : name });
  }
}

/** The body limit this app enforces with a readable error; Bun.serve's own limit sits just above it. */
export function maxBodyBytesOf(config: AppDeps["config"]): number {
  return Math.floor(config.server.max_body_mb * 1024 * 1024);
}

function withHeaders(res: Response, rc: RequestContext, servedBy: string | null): Response {
  const set = (r: Response) => {
    // On a cluster, the node that served the answer (a forwarded one keeps the serving node's).
    if (servedBy && !r.headers.has(NODE_HEADER)) r.headers.set(NODE_HEADER, servedBy);
    r.headers.set("x-request-id", rc.id);
    if (rc.format === "anthropic") r.headers.set("request-id", rc.id);
    for (const k in rc.headers) r.headers.set(k, rc.headers[k]!);
    // No window a rental's notebook opens on this origin is one it can script (api/rentals/proxy.ts).
    if (!r.headers.has("cross-origin-opener-policy")) r.headers.set("cross-origin-opener-policy", "same-origin");
    return r;
  };
  try {
    return set(res);
  } catch {
    // Responses with immutable headers (e.g. proxied fetch results) are copied once.
    return set(new Response(res.body, res));
  }
}
