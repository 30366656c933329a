import { bodyHashOf, HOP_HEADER, signHop } from "../../2-services/cluster/hop";
import type { Logger } from "../../lib/log";
import type { ForwardOutcome } from "../../2-services/metrics/metrics";
import { ApiError } from "../http/errors";
import { SseFramer, STREAM_BROKEN, streamBreakEvent } from "./stream-break";

// One hop to the node that serves a request (issue 45): the client's request as it came — its
// headers (its key among them: the serving node checks it too) and its body — plus the signed
// hop header (2-services/cluster/hop.ts), sent to the best live node first. A node that cannot
// be reached, or answers that it takes no new work, before the first byte of its answer: the
// next node is tried (under the same request id, so nothing is billed twice). The answer is
// passed through unchanged; a stream that breaks off ends with its format's error event after the
// last whole event, and what the serving node did not send it does not bill (it died, or saw
// this node leave).

export interface Peer {
  id: string;
  url: string;
}

export interface Hop {
  /** This node's id and the cluster's secret. */
  self: string;
  secret: string;
  /** The id the request is served, limited and billed under on the serving node. */
  requestId: string;
  /** The console key a signed-in session acted through: the request carries no key (hop.ts, v2). */
  keyId?: string | null;
  method: string;
  /** The path with its query, as the client sent it. */
  path: string;
  /** The matched route: which format's error event ends a broken stream. */
  route: string;
  headers: Headers;
  /** The body as it came (null: none). */
  body: string | Uint8Array | null;
  /** The client's: its leaving cancels the hop. */
  signal: AbortSignal;
  logger: Logger;
  /** Counts each hop's outcome (metrics). */
  count?: (to: string, outcome: ForwardOutcome) => void;
  /** Marks a hop to node `to` open; the function it returns closes it (its answer ended or failed). */
  open?: (to: string) => () => void;
  /** The error when no node took it, from what each said (default: model_unavailable). */
  noneTook?: (problems: string) => ApiError;
}

/** Request headers that belong to one connection, or that this hop sets itself. */
const REQUEST_SKIP = new Set(["connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-authorization", "proxy-connection", "host", "content-length", "accept-encoding", HOP_HEADER]);
/** Response headers that belong to the hop's connection (the body is passed on decoded), or that this node sets itself. */
const RESPONSE_SKIP = new Set(["connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "date", "server", "x-request-id", "request-id", "set-cookie"]);

/** Sends the request to the first of `peers` that takes it; throws model_unavailable when none does. */
export async function forwardToPeers(peers: readonly Peer[], h: Hop): Promise<Response> {
  const bodyHash = h.body === null ? null : bodyHashOf(h.body);
  const problems: string[] = [];
  for (const peer of peers) {
    const headers = new Headers();
    h.headers.forEach((v, k) => {
      if (!REQUEST_SKIP.has(k)) headers.set(k, v);
    });
    headers.set(HOP_HEADER, signHop(h.secret, { from: h.self, to: peer.id, at: Date.now(), requestId: h.requestId, bodyHash, keyId: h.keyId }, h.method, h.path));
    const close = h.open?.(peer.id) ?? (() => {});
    let res: Response;
    try {
      // No idle timeout of the hop's own: a non-streamed answer sends nothing until it is whole,
      // and the serving node bounds its work itself.
      res = await fetch(peer.url + h.path, { method: h.method, headers, body: h.body ?? undefined, signal: h.signal, redirect: "manual", timeout: false } as RequestInit);
    } catch (e) {
      close();
      if (h.signal.aborted) throw e;
      h.count?.(peer.id, "unreachable");
      problems.push(`${peer.id}: ${(e as Error).message}`);
      h.logger.warn("cluster: a node did not take a forwarded request; trying the next", { request_id: h.requestId, node: peer.id, url: peer.url, error: (e as Error).message });
      continue;
    }
    if (res.status === 503) {
      // A drained or fenced node says so before doing anything: the next one may take it.
      const text = await res.text().catch(() => "");
      close();
      if (text.includes('"node_not_serving"')) {
        h.count?.(peer.id, "not_serving");
        problems.push(`${peer.id}: takes no new work`);
        continue;
      }
      h.count?.(peer.id, "answered");
      return new Response(text, { status: res.status, headers: responseHeaders(res) });
    }
    return passThrough(res, h, peer, close);
  }
  const said = problems.join("; ") || "none is live";
  throw h.noneTook?.(said) ?? new ApiError("model_unavailable", `no node serving this model answered (${said}); retry shortly`, { headers: { "retry-after": "1" } });
}

/** The headers of another node's answer to pass on: its own, less those of the hop's connection; each cookie kept apart. */
export function responseHeaders(res: Response): Headers {
  const headers = new Headers();
  res.headers.forEach((v, k) => {
    if (!RESPONSE_SKIP.has(k)) headers.append(k, v);
  });
  for (const c of res.headers.getSetCookie()) headers.append("set-cookie", c);
  return headers;
}

async function passThrough(res: Response, h: Hop, peer: Peer, close: () => void): Promise<Response> {
  const headers = responseHeaders(res);
  const sse = (res.headers.get("content-type") ?? "").startsWith("text/event-stream");
  if (!sse || !res.body) {
    // A whole answer is read whole, so a node that dies halfway is a clean error here, not half a document.
    let bytes: ArrayBuffer;
    try {
      bytes = await res.arrayBuffer();
    } catch (e) {
      close();
      if (h.signal.aborted) throw e;
      h.count?.(peer.id, "broken");
      h.logger.warn("cluster: a forwarded answer broke off", { request_id: h.requestId, node: peer.id, error: (e as Error).message });
      throw new ApiError("upstream_error", STREAM_BROKEN);
    }
    close();
    h.count?.(peer.id, "answered");
    return new Response(bytes, { status: res.status, headers });
  }
  const reader = res.body.getReader();
  const framer = new SseFramer();
  const encoder = new TextEncoder();
  const body = new ReadableStream<Uint8Array>({
    async pull(ctrl) {
      try {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) {
            close();
            h.count?.(peer.id, "answered");
            const rest = framer.rest();
            if (rest) ctrl.enqueue(encoder.encode(rest));
            ctrl.close();
            return;
          }
          const whole = framer.push(value);
          if (whole) {
            ctrl.enqueue(encoder.encode(whole));
            return;
          }
        }
      } catch (e) {
        close();
        if (!h.signal.aborted) {
          h.count?.(peer.id, "broken");
          h.logger.warn("cluster: a forwarded stream broke off", { request_id: h.requestId, node: peer.id, error: (e as Error).message });
          ctrl.enqueue(encoder.encode(streamBreakEvent(h.route, framer.last)));
        }
        ctrl.close();
      }
    },
    cancel(reason) {
      close();
      return reader.cancel(reason);
    },
  });
  return new Response(body, { status: res.status, headers });
}
