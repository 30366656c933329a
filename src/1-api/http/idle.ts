import type { Server } from "bun";
import type { Logger } from "../../lib/log";
import { AddressCap, addressKey } from "../../lib/net/address-cap";
import { BodyPace } from "../../lib/net/body-pace";
import { clientAddressOf, pathOf, setClientAddress } from "./context";
import { ApiError, formatFor, renderError } from "./errors";
import { followBody, STREAMED } from "./in-flight";

// The listener's guard on connections (src/main.ts's fetch): what bounds the time and the number of
// requests one client may hold.
//
// Idle timeout. Bun closes a connection that has been quiet for `idleTimeout` (10 s by default), a
// response that has started streaming included. A chat stream is quiet between its first chunk and
// its first token for as long as the prompt takes, and between tokens while other requests' prompts
// are decoded: with a 0.5B model on 2 cores, 8 streams waited over 10 s and were reset
// (ECONNRESET). Requests that run work (every POST) may stay quiet as long as the work takes, once
// their body is in; the timeout is put back as their answer ends, or the connection, kept alive,
// would never be closed however long it stayed idle (Bun keeps what server.timeout set for the
// socket, and ignores a call made once the answer has been sent). Slow request heads are closed.
//
// Bodies. Bun's idle timer does not count bytes arriving in a body, so it would cut a large upload
// after 10 s; it is lifted while a body arrives and the body's pace bounds it instead
// (src/lib/net/body-pace.ts): a body that falls behind is answered 408 and its connection closed. Any
// answer given before its body has fully arrived closes the connection, so a body nobody reads
// (a 401 on a trickling POST) cannot hold it either.
//
// Per address. Requests in flight per client address are capped (src/lib/net/address-cap.ts), counted
// from the head to the end of the answer, streams included; beyond the cap a request is refused at
// once (429, Connection: close). Loopback is no exception: a reverse proxy on the same host is one.

/** The listener's idle timeout, in seconds (Bun.serve's default, which the main listener keeps). */
export const IDLE_TIMEOUT_S = 10;

/** Whether `req` is exempt from the listener's idle timeout once its body is in. */
export function runsWork(req: Request): boolean {
  return req.method === "POST";
}

export interface GuardOptions {
  /** server.body_grace_s */
  bodyGraceS: number;
  /** server.body_min_bytes_per_s */
  bodyMinBytesPerS: number;
  /** server.max_requests_per_address; 0: no cap. */
  maxRequestsPerAddress: number;
  /** Requests the per-address cap does not count (another node's signed hops). */
  exempt?: (req: Request) => boolean;
  logger: Logger;
  /** The listener's idle timeout, put back when an answer ends; IDLE_TIMEOUT_S unless the listener sets another. */
  idleTimeoutS?: number;
}

type Handle = (req: Request) => Response | undefined | Promise<Response | undefined>;

/** The listener's fetch, guarded: `serve(req, server, handle)` runs `handle` on a request it admits. */
export function createConnectionGuard(opts: GuardOptions) {
  const pace = new BodyPace({ graceMs: opts.bodyGraceS * 1000, minBytesPerS: opts.bodyMinBytesPerS });
  const cap = new AddressCap(opts.maxRequestsPerAddress);
  const slowLog = tally(opts.logger, "request bodies too slow: cut with 408 (server.body_grace_s, server.body_min_bytes_per_s)");
  const capLog = tally(opts.logger, "requests refused: too many in flight from one address, 429 (server.max_requests_per_address)");
  const idleS = opts.idleTimeoutS ?? IDLE_TIMEOUT_S;

  async function serve(req: Request, server: Pick<Server<unknown>, "timeout">, handle: Handle): Promise<Response | undefined> {
    const client = addressKey(clientAddressOf(req));
    const release = opts.exempt?.(req) ? () => {} : cap.acquire(client);
    if (!release) {
      capLog.note(client);
      return tooMany(req, cap.max);
    }
    let res: Response | undefined;
    let body: ReturnType<BodyPace["watch"]> | null = null;
    let lifted = false;
    const lift = () => {
      server.timeout(req, 0);
      lifted = true;
    };
    try {
      if (!req.body) {
        if (runsWork(req)) lift();
        res = await handle(req);
      } else {
        lift();
        const path = pathOf(req.url);
        body = pace.watch(req.body, {
          reason: () =>
            new ApiError("request_timeout", `the request body arrived too slowly: it must keep up with ${opts.bodyMinBytesPerS} bytes/s after ${opts.bodyGraceS} s (server.body_min_bytes_per_s, server.body_grace_s)`),
          onComplete: () => {
            if (!runsWork(req)) server.timeout(req, idleS);
          },
          onCut: () => slowLog.note(`${client} ${req.method} ${path}`),
        });
        const paced = new Request(req.url, { method: req.method, headers: req.headers, body: body.stream, signal: req.signal, duplex: "half" } as RequestInit);
        const address = clientAddressOf(req);
        setClientAddress(paced, address === "local" ? undefined : address);
        res = await handle(paced);
      }
    } catch (e) {
      release();
      throw e;
    }
    if (!res) {
      release(); // upgraded to a WebSocket: no longer a request
      return res;
    }
    // Answered before its body was in (refused, or cut): the rest of the body is not waited for.
    if (body && !body.complete) res = closing(res);
    return followEnd(res, () => {
      if (lifted) server.timeout(req, idleS);
      release();
    });
  }

  return { serve, pace, cap };
}

function tooMany(req: Request, max: number): Response {
  const err = new ApiError("concurrency_limit_exceeded", `too many requests in flight from this address (server.max_requests_per_address = ${max}); retry when one has finished`, {
    headers: { "retry-after": "1", connection: "close" },
  });
  return renderError(err, formatFor(pathOf(req.url), req.headers));
}

function closing(res: Response): Response {
  try {
    res.headers.set("connection", "close");
    return res;
  } catch {
    const copy = new Response(res.body, res);
    copy.headers.set("connection", "close");
    return copy;
  }
}

/**
 * `res`, with `end` run once its body has been produced, failed or been cancelled. An event stream
 * is followed through a stream of its own too (sse.ts's end promise settles a microtask after Bun
 * has taken the close, too late to put the idle timeout back): ~0.2 µs a chunk.
 */
function followEnd(res: Response, end: () => void): Response {
  if (!res.body || !STREAMED.test(res.headers.get("content-type") ?? "")) {
    end();
    return res;
  }
  return followBody(res.body, res, end);
}

/**
 * A warning that an attack cannot turn into a flood of log lines: the first event is logged, then
 * at most one line per `everyMs` counting the events since the last line, with the last one's subject.
 */
export function tally(logger: Logger, msg: string, everyMs = 10_000, now: () => number = Date.now) {
  let count = 0;
  let last = "";
  let lastLine = -Infinity;
  let timer: ReturnType<typeof setTimeout> | null = null;
  const flush = () => {
    timer = null;
    if (count === 0) return;
    logger.warn(msg, { count, last });
    count = 0;
    lastLine = now();
  };
  return {
    note(subject: string) {
      count++;
      last = subject;
      const wait = lastLine + everyMs - now();
      if (wait <= 0) flush();
      else if (!timer) {
        timer = setTimeout(flush, wait);
        (timer as { unref?: () => void }).unref?.();
      }
    },
  };
}
