import type { Server, ServerWebSocket, WebSocketHandler } from "bun";
import { Elysia } from "elysia";
import { HOP_HEADER } from "../../2-services/cluster/hop";
import { accessCookieValue, sameSecret } from "../../2-services/rentals/access";
import { nodeUnreachable, type RentalHome } from "../../2-services/rentals/cluster";
import type { RentalsService } from "../../2-services/rentals/service";
import { routableUrl } from "../http/context";
import { ApiError } from "../http/errors";
import { notebookCallTo, notebookSocketTo, type RentalEdge } from "./elsewhere";

// A rental's notebook server through the appliance's own port (issue 27; src/2-services/rentals/access.ts):
// `/rentals/{rental_id}/…` is forwarded, HTTP and WebSocket, to the server listening on loopback,
// which serves under that very path (Jupyter's base_url), so paths, redirects and cookies pass
// unchanged.
//
// Authentication of this route (STYLE: every route authenticates, decided on the matched route;
// src/1-api/http/auth.ts opens `/rentals/` to requests without an API key for this reason): the
// rental's notebook token, the credential the API hands the owner in `connection` (spec §2.3).
// The appliance checks it itself before anything reaches the notebook server — the rental must be
// running, and the request must carry its token (`?token=`, or `Authorization: token …`/`Bearer …`
// as Jupyter's clients send it) or the access cookie this proxy sets, scoped to the rental's path,
// when a `?token=` was accepted. Unknown, not running and direct rentals are a 404; a running one
// without its token a 401. The notebook server then checks the token again with its own rules.
// The token is never logged: the request log records the matched route, never the URL.
//
// No credential of the appliance reaches the notebook, whose code the renter controls (issue 41 L1):
// - Authorization passes only when it carries this rental's own notebook token (Jupyter reads
//   `token …` and `Bearer …`, and checks it again); any other value — an API key above all — is
//   removed, whatever its scheme. The token in `?token=` stays in the URL, as Jupyter needs it there.
// - x-api-key (the API's other key header) and X-CSRF-Token (the console's) are removed.
// - Every cookie the appliance sets is named `appliance_…` (the console's appliance_session and
//   appliance_device, this proxy's appliance_rental): those are taken out of the Cookie header and
//   the notebook's own cookies pass, on HTTP and on the WebSocket upgrade alike.
// - The other way, a notebook sets no cookie named `appliance_…`, none for a path outside its rental
//   (one without a Path is given the rental's), none for another domain (Domain is removed).
//
// On a cluster (issue 45) a rental's notebook runs on the node that launched it: another node
// checks the token as above, then sends the request there, HTTP and WebSocket, with a signed hop
// (elsewhere.ts), and that node checks it again and serves it as here.

const COOKIE = "appliance_rental";
const ROUTE = "/rentals/:id/*";

/** Request headers that belong to one hop (RFC 9110 §7.6.1) or are set here. */
const HOP = ["connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade", "accept-encoding"];
const WS_HOP = [...HOP, "sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions", "sec-websocket-protocol"];

/** The appliance's own cookies, whoever set them: console/auth.ts, console/devices.ts and COOKIE. */
const APPLIANCE_COOKIE = /^appliance_/i;
/** Request headers that carry the appliance's credentials besides Authorization and cookies (a hop's signature among them). */
const APPLIANCE_HEADERS = ["x-api-key", "x-csrf-token", HOP_HEADER];

type Authorized = {
  upstream: string;
  basePath: string;
  setCookie: string | null;
  /** Whether the request's Authorization holds the rental's own token (then it is forwarded). */
  tokenInHeader: boolean;
  /** The node that runs the rental (src/2-services/rentals/cluster.ts). */
  home: RentalHome;
};

/** The rental id of a `/rentals/{id}` or `/rentals/{id}/…` path, else null. */
export function rentalIdOf(path: string): string | null {
  const m = /^\/rentals\/([^/]+)(?:\/|$)/.exec(path);
  return m ? m[1]! : null;
}

/**
 * Checks a request for a rental's path against the rental (running, proxied) and its token; throws
 * the 404 or 401 it deserves.
 */
async function authorize(rentals: RentalsService, req: Request, url: URL, id: string): Promise<Authorized> {
  const target = await rentals.proxyTarget(id);
  if (!target) throw new ApiError("not_found", `No running rental ${id} is served here`);
  const expectedCookie = accessCookieValue(id, target.token);
  const query = url.searchParams.get("token");
  const header = /^\s*(?:token|bearer)\s+(\S+)\s*$/i.exec(req.headers.get("authorization") ?? "")?.[1] ?? null;
  const cookie = cookiesOf(req).get(COOKIE) ?? null;
  const ok = (query !== null && sameSecret(query, target.token)) || (header !== null && sameSecret(header, target.token)) || (cookie !== null && sameSecret(cookie, expectedCookie));
  if (!ok) throw new ApiError("invalid_credentials", "this rental's notebook needs its token: open connection.url from GET /api/v1/rentals/{rental_id}");
  const secure = url.protocol === "https:" ? "; Secure" : "";
  // Set when a token in the query was accepted: the notebook's own links carry no token.
  const setCookie = query !== null && cookie !== expectedCookie ? `${COOKIE}=${expectedCookie}; Path=${target.basePath}; HttpOnly; SameSite=Lax${secure}` : null;
  const tokenInHeader = header !== null && sameSecret(header, target.token);
  return { upstream: target.upstream, basePath: target.basePath, setCookie, tokenInHeader, home: target.home };
}

function cookiesOf(req: Request): Map<string, string> {
  const out = new Map<string, string>();
  for (const part of (req.headers.get("cookie") ?? "").split(";")) {
    const i = part.indexOf("=");
    if (i > 0) out.set(part.slice(0, i).trim(), part.slice(i + 1).trim());
  }
  return out;
}

/**
 * The headers sent upstream: the client's, less hop-by-hop ones and every credential of the
 * appliance (see the top of this file). Host and Origin pass unchanged (Jupyter compares them).
 */
function upstreamHeaders(req: Request, url: URL, drop: string[], auth: Authorized): Headers {
  const h = new Headers(req.headers);
  for (const name of [...drop, ...APPLIANCE_HEADERS]) h.delete(name);
  // Pairs kept as sent (order, repeated names), less the appliance's.
  const cookies = (req.headers.get("cookie") ?? "")
    .split(";")
    .map((part) => part.trim())
    .filter((part) => part !== "" && !APPLIANCE_COOKIE.test(part.split("=", 1)[0]!.trim()));
  if (cookies.length) h.set("cookie", cookies.join("; "));
  else h.delete("cookie");
  if (!auth.tokenInHeader) h.delete("authorization");
  h.set("host", req.headers.get("host") ?? url.host);
  h.set("x-forwarded-proto", url.protocol.replace(":", ""));
  h.set("x-forwarded-host", req.headers.get("host") ?? url.host);
  return h;
}

/**
 * A cookie the notebook server sets, as passed on, or null: one named like the appliance's is
 * dropped, and one for a path outside the rental (one for `/` would reach the console and every
 * other rental on this origin); one without a Path gets the rental's; Domain is removed (it would
 * reach the other hosts of that domain).
 */
export function scopedSetCookie(setCookie: string, basePath: string): string | null {
  const [pair, ...attributes] = setCookie.split(";");
  if (APPLIANCE_COOKIE.test(pair!.split("=", 1)[0]!.trim())) return null;
  const kept: string[] = [];
  let path: string | null = null;
  for (const a of attributes) {
    const name = a.split("=", 1)[0]!.trim().toLowerCase();
    if (name === "domain") continue;
    if (name === "path") path = a.slice(a.indexOf("=") + 1).trim();
    else kept.push(a.trim());
  }
  if (path !== null && path !== "" && !(path + "/").startsWith(basePath)) return null;
  return [pair!.trim(), `Path=${path || basePath}`, ...kept].join("; ");
}

// ---- One origin, two trust domains --------------------------------------------------------------
//
// The notebook is the renter's code, served on the appliance's own origin, where the console's
// signed-in session lives: without more, a page the renter serves (a notebook output, a file under
// /files/) could read /console/api as whoever opens it. The browser keeps it to its rental:
// - every proxied response carries a Content-Security-Policy whose fetch, script, worker, frame and
//   form sources are the rental's own path (`https://host/rentals/{id}/`, plus the operator's
//   `rentals.notebook_sources`), so `fetch("/console/api/…")`, a JSON-module import, an iframe or
//   a form posted to the console are refused by the browser;
// - CSP ignores a path after a redirect, so the notebook may not redirect to this origin outside
//   its path (a 502 here instead);
// - the appliance's own responses carry `Cross-Origin-Opener-Policy: same-origin` (app.ts) and the
//   rental's `noopener-allow-popups`: a window the notebook opens on the console, or on another
//   rental, is no window it can script;
// - headers that act on the whole origin (a service worker's scope, Alt-Svc, Clear-Site-Data, NEL,
//   HSTS, a looser COOP) are dropped, as cookies for other paths already are.
// Rentals' pages may still embed images, styles and fonts from anywhere. `rentals.access = "direct"`
// gives each notebook its own origin (its port) instead.

/** Upstream response headers that would act on the appliance's whole origin. */
const ORIGIN_WIDE = new Set([
  "cross-origin-opener-policy",
  "service-worker-allowed",
  "clear-site-data",
  "alt-svc",
  "nel",
  "report-to",
  "reporting-endpoints",
  "strict-transport-security",
  "origin-agent-cluster",
]);

/** The policy that keeps a proxied page's requests on its rental's path (and `extra` origins). */
export function isolationPolicy(origin: string, basePath: string, extra: readonly string[] = []): string {
  const own = `${origin}${basePath}`;
  const more = extra.length ? ` ${extra.join(" ")}` : "";
  // Chromium does not match an https source to a wss URL once the source has a path: both are named.
  const sockets = `${origin.replace(/^http/, "ws")}${basePath}`;
  return [
    `connect-src ${own} ${sockets}${more}`,
    `script-src ${own} 'unsafe-inline' 'unsafe-eval' blob: data:${more}`,
    `worker-src ${own} blob: data:`,
    `frame-src ${own} blob: data:${more}`,
    `child-src ${own} blob: data:`,
    "object-src 'none'",
    `form-action ${own}`,
    `base-uri ${own}`,
  ].join("; ");
}

/** Whether a redirect's Location stays on the rental (or leaves this origin altogether). */
function redirectAllowed(location: string, url: URL, basePath: string): boolean {
  let to: URL;
  try {
    to = new URL(location, url);
  } catch {
    return false;
  }
  return to.origin !== url.origin || to.pathname.startsWith(basePath);
}

async function forward(rentals: RentalsService, sources: readonly string[], request: Request, id: string, edge?: RentalEdge): Promise<Response> {
  const url = new URL(request.url);
  const auth = await authorize(rentals, request, url, id);
  if (url.pathname === `/rentals/${id}`) {
    return new Response(null, { status: 308, headers: { location: `${auth.basePath}${url.search}` } });
  }
  // Another node's rental: served there (its answer carries the cookie and policy that node sets).
  if (!auth.home.here) {
    if (!edge) throw nodeUnreachable(auth.home, "this rental's notebook");
    return notebookCallTo(auth.home, request, edge);
  }
  const hasBody = request.method !== "GET" && request.method !== "HEAD" && request.body !== null;
  let res: Response;
  try {
    res = await fetch(auth.upstream + url.pathname + url.search, {
      method: request.method,
      headers: upstreamHeaders(request, url, HOP, auth),
      body: hasBody ? request.body : undefined,
      redirect: "manual",
      signal: request.signal,
      // Bun's fetch: no http_proxy from the environment for a loopback upstream.
      proxy: false,
      ...(hasBody ? { duplex: "half" } : {}),
    });
  } catch (e) {
    if (request.signal.aborted) throw e;
    throw new ApiError("upstream_error", `the rental's notebook server does not answer (${(e as Error).message})`);
  }
  const location = res.headers.get("location");
  if (res.status >= 300 && res.status < 400 && location !== null && !redirectAllowed(location, url, auth.basePath)) {
    await res.body?.cancel();
    throw new ApiError("upstream_error", `the rental's notebook server redirected outside ${auth.basePath}, which this proxy does not pass on`);
  }
  const headers = new Headers();
  res.headers.forEach((v, k) => {
    if (k !== "set-cookie" && k !== "connection" && k !== "keep-alive" && k !== "transfer-encoding" && !ORIGIN_WIDE.has(k)) headers.append(k, v);
  });
  for (const c of res.headers.getSetCookie()) {
    const scoped = scopedSetCookie(c, auth.basePath);
    if (scoped !== null) headers.append("set-cookie", scoped);
  }
  if (auth.setCookie) headers.append("set-cookie", auth.setCookie);
  // Appended: a policy the notebook sends itself applies too, and can only narrow this one.
  headers.append("content-security-policy", isolationPolicy(url.origin, auth.basePath, sources));
  headers.set("cross-origin-opener-policy", "noopener-allow-popups");
  return new Response(request.method === "HEAD" ? null : res.body, { status: res.status, statusText: res.statusText, headers });
}

/** The HTTP side, mounted by createApp: every method, any path under the rental, body untouched. */
export function rentalProxyRoutes(rentals: RentalsService, notebookSources: readonly string[] = [], edge?: RentalEdge) {
  return new Elysia({ name: "rental-proxy" })
    .all("/rentals/:id", ({ request, params }) => forward(rentals, notebookSources, request, params.id, edge))
    .all(ROUTE, ({ request, params }) => forward(rentals, notebookSources, request, params.id, edge));
}

// ---- WebSocket (Jupyter's kernel channels, terminals) ----------------------------------------

/** What one proxied WebSocket carries: the upstream socket, opened before the client's upgrade. */
export interface RentalSocketData {
  rentalSocket: true;
  upstream: WebSocket;
  /** Upstream messages that came before the client's side opened. */
  early: (string | ArrayBuffer)[];
  /** The upstream's close, when it came before the client's side opened. */
  closed: { code: number; reason: string } | null;
  client: ServerWebSocket<RentalSocketData> | null;
}

/** A close code that may be sent in a close frame (RFC 6455 §7.4): 1005/1006/1015 never are. */
function sendable(code: number): number {
  return code === 1000 || (code >= 1001 && code <= 1014 && code !== 1005 && code !== 1006) || (code >= 3000 && code <= 4999) ? code : 1000;
}

/**
 * For Bun.serve's fetch: a WebSocket upgrade for `/rentals/{id}/…`, checked as the HTTP side checks
 * it, is connected upstream first (so the client gets the subprotocol the notebook server chose),
 * then upgraded; resolves to undefined once upgraded. A refused or failed one is answered by
 * `fallback` (the app: its 401/404 in the API's envelope, logged). Null for every other request,
 * synchronously, so the rest pays one header read.
 */
export function rentalUpgrade(
  rentals: RentalsService,
  req: Request,
  server: Server<unknown>,
  fallback: () => Promise<Response>,
  edge?: RentalEdge,
): Promise<Response | undefined> | null {
  if (req.headers.get("upgrade")?.toLowerCase() !== "websocket") return null;
  // Bun's URL has no host when the Host header is missing or malformed (context.ts, routableUrl).
  const url = new URL(routableUrl(req.url));
  const id = rentalIdOf(url.pathname);
  if (id === null) return null;
  return (async () => {
    let auth: Authorized;
    try {
      auth = await authorize(rentals, req, url, id);
    } catch {
      return fallback();
    }
    const protocols = (req.headers.get("sec-websocket-protocol") ?? "").split(",").map((p) => p.trim()).filter(Boolean);
    let headers: Record<string, string> = {};
    let to = auth.upstream.replace(/^http/, "ws") + url.pathname + url.search;
    if (auth.home.here) upstreamHeaders(req, url, WS_HOP, auth).forEach((v, k) => (headers[k] = v));
    else {
      // Another node's rental: the socket is opened to that node, which checks the token again; a
      // node not live (or a request that came on a hop) is answered by the app (its 503).
      const there = edge ? notebookSocketTo(auth.home, req, url.pathname + url.search, edge) : null;
      if (!there) return fallback();
      ({ url: to, headers } = there);
    }
    const upstream = new WebSocket(to, { headers, protocols } as unknown as string[]);
    upstream.binaryType = "arraybuffer";
    const data: RentalSocketData = { rentalSocket: true, upstream, early: [], closed: null, client: null };
    const opened = await new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), 10_000);
      upstream.onopen = () => (clearTimeout(timer), resolve(true));
      upstream.onerror = () => (clearTimeout(timer), resolve(false));
      upstream.onclose = () => (clearTimeout(timer), resolve(false));
    });
    if (!opened) {
      upstream.close();
      return new Response("the rental's notebook server refused the WebSocket", { status: 502 });
    }
    upstream.onmessage = (e) => (data.client ? data.client.send(e.data as string | ArrayBuffer) : data.early.push(e.data as string | ArrayBuffer));
    upstream.onclose = (e) => (data.client ? data.client.close(sendable(e.code), e.reason) : (data.closed = { code: e.code, reason: e.reason }));
    upstream.onerror = () => {};
    const replyHeaders: Record<string, string> = {};
    if (upstream.protocol) replyHeaders["sec-websocket-protocol"] = upstream.protocol;
    if (auth.setCookie) replyHeaders["set-cookie"] = auth.setCookie;
    if ((server as Server<RentalSocketData>).upgrade(req, { data, headers: replyHeaders })) return undefined;
    upstream.close();
    return new Response("WebSocket upgrade failed", { status: 400 });
  })();
}

/** For Bun.serve's `websocket`: frames both ways, and a close on either side closes the other with its code. */
export const rentalWebSocket: WebSocketHandler<RentalSocketData> = {
  // Jupyter's kernels may sit quiet for long; Bun's pings keep a live client's socket open.
  idleTimeout: 960,
  sendPings: true,
  open(ws) {
    const d = ws.data;
    d.client = ws;
    for (const m of d.early.splice(0)) ws.send(m);
    if (d.closed) ws.close(sendable(d.closed.code), d.closed.reason);
  },
  message(ws, message) {
    const up = ws.data.upstream;
    if (up.readyState === WebSocket.OPEN) up.send(message);
  },
  close(ws, code, reason) {
    const up = ws.data.upstream;
    if (up.readyState === WebSocket.OPEN || up.readyState === WebSocket.CONNECTING) up.close(sendable(code), reason);
  },
};
