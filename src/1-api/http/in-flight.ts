import { sseBodyEnd } from "./sse";

// Requests in flight, counted until their response body has been sent (streams included): what a
// graceful stop waits for. Bun's server.stop() returns once no request handler is running, which
// is before a streamed answer has finished.

/** Bodies produced over time: event streams and file downloads. */
export const STREAMED = /^(text\/event-stream|application\/octet-stream|application\/jsonl|application\/x-ndjson)/i;

export class InFlight {
  private count = 0;
  private waiters: (() => void)[] = [];

  get size() {
    return this.count;
  }

  async track(handle: () => Promise<Response>): Promise<Response> {
    this.count++;
    let res: Response;
    try {
      res = await handle();
    } catch (e) {
      this.done();
      throw e;
    }
    if (!res.body || !STREAMED.test(res.headers.get("content-type") ?? "")) {
      // An answer already in memory is written at once; only streamed bodies are followed.
      this.done();
      return res;
    }
    // an event stream tells its end itself: each chunk goes out through one stream, not two
    const sse = sseBodyEnd(res.body);
    if (sse) {
      void sse.then(() => this.done());
      return res;
    }
    let ended = false;
    const end = () => {
      if (!ended) {
        ended = true;
        this.done();
      }
    };
    return followBody(res.body, res, end);
  }

  /** Resolves true once nothing is in flight, false if `ms` passes first. */
  drained(ms: number): Promise<boolean> {
    if (this.count === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== wake);
        resolve(false);
      }, ms);
      const wake = () => {
        clearTimeout(timer);
        resolve(true);
      };
      this.waiters.push(wake);
    });
  }

  private done() {
    this.count--;
    if (this.count === 0) for (const w of this.waiters.splice(0)) w();
  }
}

/**
 * `res` answered with `body` followed through a stream of its own: `end` runs once the body has
 * been produced (before its close: Bun ignores what is set on a socket once the answer is sent),
 * has failed, or was cancelled by the client.
 */
export function followBody(body: ReadableStream<Uint8Array>, res: Response, end: () => void): Response {
  const reader = body.getReader();
  const followed = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const { value, done } = await reader.read();
        if (done) {
          end();
          controller.close();
        } else controller.enqueue(value);
      } catch (e) {
        controller.error(e);
        end();
      }
    },
    cancel(reason) {
      end();
      return reader.cancel(reason);
    },
  });
  return new Response(followed, { status: res.status, statusText: res.statusText, headers: res.headers });
}
