import type { Principal } from "../../2-services/accounts/types";
import { forwardedClient, NO_TRUSTED_PROXIES, type TrustedProxies } from "../../lib/net/trusted-proxies";
import type { WireFormat } from "./errors";
import type { Hop } from "../../2-services/cluster/hop";

/** Per-request state shared by the edge (auth, limits, logging) and the routes. */
export interface RequestContext {
  id: string;
  start: number;
  path: string;
  format: WireFormat;
  principal: Principal | null;
  /** The matched route pattern, for logs (bounded cardinality: never the raw path). */
  route: string;
  /** Headers added to the response whatever it is (rate-limit state). */
  headers: Record<string, string>;
  /** Set once auth, scope and limits have run on the matched route (src/app.ts, admit). */
  admitted?: boolean;
  /** The hop this request came on from another node of the cluster, checked (src/app.ts, admit); it is not forwarded again. */
  hop?: Hop;
  /**
   * A console session's request to the inference API (issue 48): who it acts as, decided by the
   * console's route from the session cookie (src/1-api/console/inference.ts). Set only by the app
   * itself on a request it made; a client cannot set it.
   */
  sessionPrincipal?: Principal;
  /** A body without a length ran past server.max_body_mb while being read (src/1-api/http/body.ts). */
  bodyTooLarge?: boolean;
}

const contexts = new WeakMap<Request, RequestContext>();

export function bindContext(req: Request, rc: RequestContext): void {
  contexts.set(req, rc);
}

export function contextOf(req: Request): RequestContext {
  const rc = contexts.get(req);
  if (!rc) throw new Error("request has no context: it did not enter through createApp().handle");
  return rc;
}

const addresses = new WeakMap<Request, string>();

/**
 * Set by the listener (main.ts) from the socket's peer: the client's address, which is the peer
 * unless the peer is one of server.trusted_proxies — then the client that X-Forwarded-For names
 * (src/lib/net/trusted-proxies.ts: the right-most address no listed proxy stands for). A copy of a
 * request is given the address its original resolved to, with no proxies: it is taken as it is.
 */
export function setClientAddress(req: Request, peer: string | undefined, proxies: TrustedProxies = NO_TRUSTED_PROXIES): void {
  if (peer) addresses.set(req, forwardedClient(peer, req.headers.get("x-forwarded-for"), proxies));
}

/**
 * The client's address: the one function everything keyed on the client uses (the sign-in
 * throttle, the per-address caps, logs). "local" for requests served without a socket (tests).
 */
export function clientAddressOf(req: Request): string {
  return addresses.get(req) ?? "local";
}

/** Headers a proxy adds: a request carrying one came through some proxy, listed or not. */
const FORWARDING = ["x-forwarded-for", "forwarded", "x-real-ip", "x-forwarded-host", "x-forwarded-proto", "via"];

/** The client, and whether the request carries a proxy's forwarding headers (the console's throttle tells the host itself by it). */
export function clientOf(req: Request): { address: string; forwarded: boolean } {
  return { address: clientAddressOf(req), forwarded: FORWARDING.some((h) => req.headers.has(h)) };
}

/** The authenticated caller of a route under /v1 or /api/v1 (auth has already run). */
export function principalOf(req: Request): Principal {
  const p = contextOf(req).principal;
  if (!p) throw new Error("route reached without a principal");
  return p;
}

/** Where the path of a request's URL starts: Bun hands over "/v1/…" alone when the Host is missing or no authority. */
function pathStart(url: string): number {
  return url.startsWith("/") ? 0 : url.indexOf("/", url.indexOf("//") + 2);
}

/** "http://host:port/v1/models?x" (or "/v1/models?x") → "/v1/models" without building a URL object. */
export function pathOf(url: string): string {
  const start = pathStart(url);
  if (start < 0) return "/";
  let end = url.length;
  const q = url.indexOf("?", start);
  if (q >= 0) end = q;
  const h = url.indexOf("#", start);
  if (h >= 0 && h < end) end = h;
  return url.slice(start, end);
}

/** "http://host:port/v1/x?y#z" → "/v1/x?y": what a hop to another node asks for (and signs). */
export function pathAndQueryOf(url: string): string {
  const start = pathStart(url);
  if (start < 0) return "/";
  const h = url.indexOf("#", start);
  return url.slice(start, h < 0 ? url.length : h);
}

/** Elysia's shortcut searches for the path from this index of the URL (see routableUrl). */
const ELYSIA_PATH_FROM = 11;
/** The authority given to a request that came without a usable Host (HTTP/1.0, an empty or malformed header). */
const NO_HOST = "no-host.invalid";

/**
 * The request's URL in a form every reader splits at its real path: absolute, with the path
 * starting at index 11 or later. Elysia finds the path by searching for "/" from index 11
 * (elysiajs/elysia#748, its `standardHostname`): with a host of 3 characters or fewer
 * ("http://ai/v1/models") it cut the path ("/models"), and skipped a short first segment
 * ("http://a/ab/v1/files" routed as "/v1/files"); a URL without a host (Bun's, when the Host is
 * missing or malformed) had any first segment of 11 characters or more skipped the same way. A short
 * authority gets user-info padding, which changes nothing a reader uses (origin, host, path, query:
 * `new URL()` reads them as before); a missing one gets NO_HOST. Anything else is returned as is.
 */
export function routableUrl(url: string): string {
  if (url.startsWith("/")) return `http://${NO_HOST}${url}`;
  const start = pathStart(url);
  if (start < 0) return routableUrl(`${url}/`);
  if (start >= ELYSIA_PATH_FROM) return url;
  const scheme = url.indexOf("//") + 2;
  return `${url.slice(0, scheme)}${"_".repeat(ELYSIA_PATH_FROM - start)}@${url.slice(scheme)}`;
}

/** The request as the router must see it (routableUrl): itself, or a copy with its context and address. */
export function routableRequest(req: Request): Request {
  const url = routableUrl(req.url);
  if (url === req.url) return req;
  const copy = new Request(url, req);
  const rc = contexts.get(req);
  if (rc) contexts.set(copy, rc);
  const address = addresses.get(req);
  if (address) addresses.set(copy, address);
  return copy;
}
