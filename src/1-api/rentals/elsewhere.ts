import { HOP_HEADER, signHop } from "../../2-services/cluster/hop";
import { nodeUnreachable, type RentalHome } from "../../2-services/rentals/cluster";
import { newId } from "../../lib/ids";
import type { Logger } from "../../lib/log";
import { forwardToPeers, responseHeaders } from "../cluster/forward";
import { contextOf, pathAndQueryOf } from "../http/context";

// A rental of another node of the cluster (issue 45; src/2-services/rentals/cluster.ts): what
// touches its notebook is sent one hop to the node that runs it, signed with the cluster's secret
// (src/2-services/cluster/hop.ts), with the client's own headers — its key, or the notebook's token
// and cookie — which that node checks again. API calls (create, stop, logs) go through the
// cluster's forwarder (src/1-api/cluster/forward.ts); the notebook's HTTP is streamed both ways
// unread (its hop names no body hash) and its WebSockets are opened to that node with the hop
// header (proxy.ts pipes them). The client's Host is kept, so that node's proxy builds the rental's
// policy and redirect checks for the origin the browser sees, and Jupyter compares like with like.
// A node that is not live, or does not answer, is a 503 rental_node_unreachable; a hop is never
// forwarded again (two nodes that disagree where a rental runs end there).

export interface RentalEdge {
  /** This node's id and the cluster's secret (src/2-services/cluster/node.ts). */
  node: { id: string; secret: string };
  logger: Logger;
}

export type Elsewhere = Extract<RentalHome, { here: false }>;

/** Request headers of one connection, or that the hop sets itself. */
const REQUEST_SKIP = ["connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "content-length", "accept-encoding", HOP_HEADER];
const SOCKET_SKIP = [...REQUEST_SKIP, "sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions", "sec-websocket-protocol"];

/** Refuses a request that already came on a hop: it is not sent on again. */
function once(request: Request, home: Elsewhere, what: string): void {
  if (contextOf(request).hop) throw nodeUnreachable(home, what, "did not take it from the node that forwarded it (the nodes' views differ for a moment; retry)");
}

/** An API call about a rental of another node (create, stop, logs), as the client sent it; `body` as it came (null: none). */
export async function rentalCallTo(home: Elsewhere, request: Request, body: string | null, edge: RentalEdge, what: string): Promise<Response> {
  once(request, home, what);
  if (!home.peer) throw nodeUnreachable(home, what);
  const rc = contextOf(request);
  return forwardToPeers([home.peer], {
    self: edge.node.id,
    secret: edge.node.secret,
    requestId: rc.id,
    method: request.method,
    path: pathAndQueryOf(request.url),
    route: rc.route,
    headers: request.headers,
    body,
    signal: request.signal,
    logger: edge.logger,
    // unreachable, or it takes no new work: said of a rental
    noneTook: (problems) => nodeUnreachable(home, what, `does not take it now (${problems})`),
  });
}

/** The hop header of `method path` to node `to`, for a notebook request (no body hash: the body is streamed unread). */
const hopTo = (to: string, requestId: string, method: string, path: string, edge: RentalEdge): string =>
  signHop(edge.node.secret, { from: edge.node.id, to, at: Date.now(), requestId, bodyHash: null }, method, path);

/** A notebook HTTP request for a rental of another node, streamed there and back. */
export async function notebookCallTo(home: Elsewhere, request: Request, edge: RentalEdge): Promise<Response> {
  const what = "this rental's notebook";
  once(request, home, what);
  const peer = home.peer;
  if (!peer) throw nodeUnreachable(home, what);
  const path = pathAndQueryOf(request.url);
  const headers = new Headers(request.headers);
  for (const name of REQUEST_SKIP) headers.delete(name);
  headers.set(HOP_HEADER, hopTo(peer.id, contextOf(request).id, request.method, path, edge));
  const hasBody = request.method !== "GET" && request.method !== "HEAD" && request.body !== null;
  let res: Response;
  try {
    res = await fetch(peer.url + path, {
      method: request.method,
      headers,
      body: hasBody ? request.body : undefined,
      redirect: "manual",
      signal: request.signal,
      // No idle timeout of the hop's own: the notebook's answers may be long (a download), and its node bounds its work.
      timeout: false,
      ...(hasBody ? { duplex: "half" } : {}),
    } as RequestInit);
  } catch (e) {
    if (request.signal.aborted) throw e;
    edge.logger.warn("cluster: a rental's node did not take a notebook request", { request_id: contextOf(request).id, node: peer.id, error: (e as Error).message });
    throw nodeUnreachable(home, what, "does not answer");
  }
  return new Response(request.method === "HEAD" ? null : res.body, { status: res.status, statusText: res.statusText, headers: responseHeaders(res) });
}

/**
 * Where a notebook WebSocket for a rental of another node is opened: that node's URL for the same
 * path, and the client's headers with the hop's. Null when the request already came on a hop or
 * the node is not live (the caller answers through the app: its 503 in the API's envelope).
 */
export function notebookSocketTo(home: Elsewhere, request: Request, path: string, edge: RentalEdge): { url: string; headers: Record<string, string> } | null {
  const peer = home.peer;
  if (!peer || request.headers.has(HOP_HEADER)) return null;
  const headers: Record<string, string> = {};
  request.headers.forEach((v, k) => {
    if (!SOCKET_SKIP.includes(k)) headers[k] = v;
  });
  headers[HOP_HEADER] = hopTo(peer.id, newId("req_"), "GET", path, edge);
  return { url: peer.url.replace(/^http/, "ws") + path, headers };
}
