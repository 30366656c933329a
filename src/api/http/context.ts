import type { Principal } from "../../accounts/types";
import type { WireFormat } from "./errors";

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
  /** A body without a length ran past server.max_body_mb while being read (src/api/http/body.ts). */
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

/** Set by the listener (main.ts) from the socket: the client's address, never from a header. */
export function setClientAddress(req: Request, address: string | undefined): void {
  if (address) addresses.set(req, address);
}

/** The client's address as the socket saw it; "local" for requests served without a socket (tests). */
export function clientAddressOf(req: Request): string {
  return addresses.get(req) ?? "local";
}

/** The authenticated caller of a route under /v1 or /api/v1 (auth has already run). */
export function principalOf(req: Request): Principal {
  const p = contextOf(req).principal;
  if (!p) throw new Error("route reached without a principal");
  return p;
}

/** "http://host:port/v1/models?x" → "/v1/models" without building a URL object. */
export function pathOf(url: string): string {
  const start = url.indexOf("/", url.indexOf("//") + 2);
  if (start < 0) return "/";
  let end = url.length;
  const q = url.indexOf("?", start);
  if (q >= 0) end = q;
  const h = url.indexOf("#", start);
  if (h >= 0 && h < end) end = h;
  return url.slice(start, end);
}
