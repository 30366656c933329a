import { Elysia } from "elysia";
import { healthRoutes } from "./api/health";
import { authenticateRequest, needsKeyWithoutScope, requiredScope, requireScope } from "./api/http/auth";
import { consoleRoutes } from "./api/console/routes";
import { bindContext, clientAddressOf, contextOf, pathOf, type RequestContext } from "./api/http/context";
import { ApiError, asApiError, formatFor, renderError } from "./api/http/errors";
import { validationToApiError } from "./api/http/validation";
import { messagesRoutes } from "./api/anthropic/routes";
import { batchesRoutes } from "./api/openai/batches";
import { chatRoutes } from "./api/openai/chat";
import { classifyRoutes } from "./api/openai/classify";
import { embeddingsRoutes } from "./api/openai/embeddings";
import { filesRoutes } from "./api/openai/files";
import { rentalsRoutes } from "./api/rentals/routes";
import { imagesRoutes } from "./api/openai/images";
import { responsesRoutes } from "./api/responses/routes";
import { modelsRoutes } from "./api/openai/models";
import { metricsRoutes } from "./api/metrics";
import { buildOpenApi, type OpenApiDocument } from "./api/openapi/document";
import { openapiRoutes } from "./api/openapi/routes";
import { newId } from "./ids";
import { routeMatcher } from "./metrics/routes";
import type { AppDeps } from "./services";

export interface App {
  /** Serves one request without any socket: main.ts passes it to Bun.serve, tests call it directly. */
  handle(req: Request): Promise<Response>;
}

/**
 * Composes the edge (request id, auth, limits, errors, logs) and the route plugins. Never listens.
 * Auth runs before Elysia parses anything, so a bad key is a 401 whatever the body holds.
 */
export function createApp(deps: AppDeps): App {
  const { accounts, limits, logger, metrics } = deps;
  const maxBodyBytes = maxBodyBytesOf(deps.config);

  const routes = new Elysia()
    .onTransform({ as: "global" }, ({ request, route }) => {
      contextOf(request).route = route;
    })
    .onError({ as: "global" }, ({ code, error, request }) => {
      const rc = contextOf(request);
      return errorResponse(rc, toApiError(code, error, request));
    })
    .use(healthRoutes(deps))
    .use(metricsRoutes(deps))
    .use(modelsRoutes(deps.registry))
    .use(chatRoutes(deps.chat, logger))
    .use(responsesRoutes(deps.chat, logger))
    .use(messagesRoutes(deps.chat, logger))
    .use(embeddingsRoutes(deps))
    .use(classifyRoutes(deps))
    .use(imagesRoutes(deps))
    .use(filesRoutes(deps.files))
    .use(batchesRoutes(deps.batches))
    .use(rentalsRoutes(deps.rentals))
    .use(consoleRoutes(deps.console.auth, deps.console.views, clientAddressOf))
    // The document is built from this very route table (TypeBox schemas included) on first use.
    .use(openapiRoutes((): OpenApiDocument => buildOpenApi(routes)));
  // The route pattern of a request answered before Elysia routed it (401, 429, 413): logs and
  // metrics name the route, never the raw path.
  const routeOf = routeMatcher(routes.routes);

  function toApiError(code: string | number, error: unknown, request: Request): ApiError {
    if (error instanceof ApiError) return error;
    if (code === "VALIDATION") return validationToApiError(error);
    if (code === "PARSE") return new ApiError("invalid_json", "request body is not valid JSON");
    if (code === "NOT_FOUND") return new ApiError("not_found", `Invalid URL (${request.method} ${pathOf(request.url)})`);
    return unexpected(contextOf(request), error);
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

  return {
    async handle(req: Request): Promise<Response> {
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
      bindContext(req, rc);
      let res: Response;
      try {
        const scope = requiredScope(path);
        if (scope) {
          rc.principal = authenticateRequest(accounts, req.headers, path);
          requireScope(rc.principal, scope);
          rc.headers = limits.request(rc.principal);
        } else if (needsKeyWithoutScope(path)) {
          rc.principal = authenticateRequest(accounts, req.headers, path);
        }
        const length = Number(req.headers.get("content-length") ?? 0);
        if (length > maxBodyBytes)
          throw new ApiError(
            "payload_too_large",
            `request body is ${length} bytes; the limit is ${maxBodyBytes} bytes (server.max_body_mb)`,
          );
        res = await routes.handle(req);
      } catch (e) {
        res = errorResponse(rc, e instanceof ApiError ? e : unexpected(rc, e));
      }
      res = withHeaders(res, rc);
      if (rc.route === "unmatched") rc.route = routeOf(req.method, path);
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
    },
  };
}

/** The body limit this app enforces with a readable error; Bun.serve's own limit sits just above it. */
export function maxBodyBytesOf(config: AppDeps["config"]): number {
  return Math.floor(config.server.max_body_mb * 1024 * 1024);
}

function withHeaders(res: Response, rc: RequestContext): Response {
  const set = (r: Response) => {
    r.headers.set("x-request-id", rc.id);
    if (rc.format === "anthropic") r.headers.set("request-id", rc.id);
    for (const k in rc.headers) r.headers.set(k, rc.headers[k]!);
    return r;
  };
  try {
    return set(res);
  } catch {
    // Responses with immutable headers (e.g. proxied fetch results) are copied once.
    return set(new Response(res.body, res));
  }
}
