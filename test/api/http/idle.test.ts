import { expect, test } from "bun:test";
import { connect } from "node:net";
import type { Server } from "bun";
import { setClientAddress } from "../../../src/1-api/http/context";
import { ApiError, renderError } from "../../../src/1-api/http/errors";
import { createConnectionGuard, runsWork, tally } from "../../../src/1-api/http/idle";
import { sseResponse } from "../../../src/1-api/http/sse";
import { memoryLogger } from "../../../src/lib/log";

// The listener's guard (src/1-api/http/idle.ts), on a plain Bun listener with a 1 s idle timeout,
// through the same createConnectionGuard().serve the appliance's listener calls (src/main.ts).
// (Bun checks idle sockets on a 4 s tick: a 1 s timeout cuts a quiet connection after 4 to 8 s.)
// The real server under 600 trickling bodies is test/api/http/slow-bodies.test.ts.

type Handler = (req: Request) => Response | Promise<Response>;

/** A listener whose requests pass the guard, then `handler`; bodies get a 1 s grace at 16 KiB/s. */
function guarded(handler: Handler, o: { maxRequestsPerAddress?: number } = {}) {
  const logger = memoryLogger();
  const guard = createConnectionGuard({ bodyGraceS: 1, bodyMinBytesPerS: 16_384, maxRequestsPerAddress: o.maxRequestsPerAddress ?? 0, logger, idleTimeoutS: 1 });
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    idleTimeout: 1,
    fetch(req: Request, srv: Server<unknown>) {
      setClientAddress(req, srv.requestIP(req)?.address);
      return guard.serve(req, srv, handler) as Promise<Response>; // undefined only for a WebSocket upgrade
    },
  });
  return { server, logger, guard, url: `http://127.0.0.1:${server.port}` };
}

/** What an app does with a body it reads: a failed read is answered with the failure (app.ts does so through Elysia). */
async function echoLength(req: Request): Promise<Response> {
  try {
    return new Response(`got ${(await req.arrayBuffer()).byteLength}`);
  } catch (e) {
    if (e instanceof ApiError) return renderError(e, "openai");
    throw e;
  }
}

/** Writes `head`, then `chunks` over time, on a raw socket; resolves with what came back once it closes. */
function rawRequest(port: number, head: string, chunks: AsyncIterable<string | Uint8Array>, limitMs = 20_000) {
  return new Promise<{ text: string; ms: number }>((resolve) => {
    const t0 = performance.now();
    let text = "";
    const s = connect(port, "127.0.0.1");
    s.on("data", (d) => (text += d.toString("latin1")));
    s.on("error", () => {});
    s.on("close", () => resolve({ text, ms: performance.now() - t0 }));
    const limit = setTimeout(() => s.destroy(), limitMs);
    s.on("close", () => clearTimeout(limit));
    s.write(head);
    void (async () => {
      for await (const c of chunks) {
        if (s.destroyed) return;
        s.write(c);
      }
    })();
  });
}

async function* trickle(everyMs: number) {
  for (;;) {
    yield "x";
    await Bun.sleep(everyMs);
  }
}

test("work (POST) is exempt from the idle timeout; other requests are not", () => {
  expect(runsWork(new Request("http://x/v1/chat/completions", { method: "POST", body: "{}" }))).toBe(true);
  expect(runsWork(new Request("http://x/v1/models"))).toBe(false);
});

test("a stream that goes quiet longer than the idle timeout survives when it runs work, and is cut otherwise", { timeout: 20_000 }, async () => {
  const { server, url } = guarded(async (req) => {
    if (req.body) await req.text(); // the chat route reads its body first; the idle timeout stays lifted after it
    const enc = new TextEncoder();
    const body = new ReadableStream<Uint8Array>({
      async pull(c) {
        c.enqueue(enc.encode("data: first\n\n"));
        await Bun.sleep(9000);
        c.enqueue(enc.encode("data: second\n\n"));
        c.close();
      },
    });
    return new Response(body, { headers: { "content-type": "text/event-stream" } });
  });
  try {
    const [post, get] = await Promise.all([
      fetch(`${url}/stream`, { method: "POST", body: "{}", keepalive: false }).then((r) => r.text()),
      // the same stream on a GET is cut: what every chat stream got before
      fetch(`${url}/stream`, { keepalive: false })
        .then((r) => r.text())
        .then(
          (t) => t,
          (e: Error & { code?: string }) => `error ${e.code}`,
        ),
    ]);
    expect(post).toBe("data: first\n\ndata: second\n\n");
    expect(get).toBe("error ECONNRESET");
  } finally {
    server.stop(true);
  }
});

test("a kept-alive connection is closed once idle after work's answer, a plain one and a stream alike", { timeout: 20_000 }, async () => {
  // Bun keeps the lifted timeout on the socket: before the guard put it back, a connection that
  // had sent one small POST stayed open, idle, for ever (one more way to hold descriptors).
  const { server } = guarded(async (req) => {
    await req.text();
    if (new URL(req.url).pathname === "/plain") return new Response("ok");
    return sseResponse(
      (async function* () {
        yield { data: "a" };
        await Bun.sleep(1500); // quiet for longer than the idle timeout: work, so not cut
        yield { data: "b" };
      })(),
    );
  });
  try {
    const once = async function* () {
      yield "{}";
    };
    const [plain, stream] = await Promise.all(["/plain", "/stream"].map((path) => rawRequest(server.port!, `POST ${path} HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n`, once(), 15_000)));
    expect(plain!.text).toStartWith("HTTP/1.1 200");
    expect(plain!.text).toEndWith("ok");
    expect(stream!.text).toContain("data: b");
    // closed by the idle timeout (1 s, on Bun's 4 s tick), not by the test's 15 s
    for (const r of [plain!, stream!]) expect(r.ms).toBeLessThan(10_000);
  } finally {
    server.stop(true);
  }
});

test("a body that keeps its pace is received whole although it takes longer than the idle timeout", { timeout: 20_000 }, async () => {
  // Bun's idle timer does not count body bytes: without the guard's lift this upload was cut at 4 s.
  const { server } = guarded(echoLength);
  try {
    const chunks = async function* () {
      for (let i = 0; i < 30; i++) {
        yield new Uint8Array(10_000);
        await Bun.sleep(300);
      }
    };
    const { text, ms } = await rawRequest(server.port!, "PUT /upload HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: 300000\r\n\r\n", chunks());
    expect(ms).toBeGreaterThan(8000);
    expect(text).toStartWith("HTTP/1.1 200");
    expect(text).toEndWith("got 300000");
  } finally {
    server.stop(true);
  }
});

test("a trickling body is answered 408 in the OpenAI shape, its connection closed, and the cut logged", { timeout: 20_000 }, async () => {
  const { server, logger } = guarded(echoLength);
  try {
    const { text, ms } = await rawRequest(server.port!, "POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\n\r\n", trickle(500));
    expect(text).toStartWith("HTTP/1.1 408");
    expect(text.toLowerCase()).toContain("connection: close");
    const body = JSON.parse(text.slice(text.indexOf("\r\n\r\n") + 4));
    expect(body.error).toMatchObject({ type: "invalid_request_error", code: "request_timeout", param: null });
    expect(body.error.message).toContain("server.body_min_bytes_per_s");
    // cut between the end of the grace (1 s) and the next sweep (1 s later), well before the 20 s limit
    expect(ms).toBeGreaterThan(900);
    expect(ms).toBeLessThan(5000);
    expect(logger.lines.filter((l) => l.level === "warn")).toEqual([expect.objectContaining({ msg: expect.stringContaining("too slow"), count: 1, last: "127.0.0.1 POST /v1/chat/completions" })]);
  } finally {
    server.stop(true);
  }
});

test("an answer given before the body is in (a 401 nobody read the body for) closes the connection at once", { timeout: 20_000 }, async () => {
  const { server } = guarded(() => renderError(new ApiError("invalid_api_key", "Invalid API key"), "openai"));
  try {
    const { text, ms } = await rawRequest(server.port!, "POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\n\r\n", trickle(500));
    expect(text).toStartWith("HTTP/1.1 401");
    expect(text.toLowerCase()).toContain("connection: close");
    expect(ms).toBeLessThan(1000);
  } finally {
    server.stop(true);
  }
});

test("beyond the per-address cap a request is refused at once: 429, Retry-After, Connection: close, in its endpoint's shape", { timeout: 20_000 }, async () => {
  let open = 0;
  const gate = Promise.withResolvers<void>();
  const { server, url, guard } = guarded(
    async (req) => {
      if (new URL(req.url).pathname === "/hold") {
        open++;
        await gate.promise;
      }
      return new Response("ok");
    },
    { maxRequestsPerAddress: 2 },
  );
  try {
    const held = [fetch(`${url}/hold`), fetch(`${url}/hold`)];
    while (open < 2) await Bun.sleep(10);
    const refused = await fetch(`${url}/v1/models`);
    expect(refused.status).toBe(429);
    expect(refused.headers.get("retry-after")).toBe("1");
    expect(refused.headers.get("connection")).toBe("close");
    expect((await refused.json()).error).toMatchObject({ type: "rate_limit_error", code: "concurrency_limit_exceeded" });
    const messages = await fetch(`${url}/v1/messages`, { method: "POST", body: "{}" });
    expect(messages.status).toBe(429);
    expect(await messages.json()).toMatchObject({ type: "error", error: { type: "rate_limit_error" } });
    expect(guard.cap.inFlight("127.0.0.1")).toBe(2);
    gate.resolve();
    await Promise.all(held.map((p) => p.then((r) => r.text())));
    expect(guard.cap.inFlight("127.0.0.1")).toBe(0);
    expect(await (await fetch(`${url}/v1/models`)).text()).toBe("ok");
  } finally {
    server.stop(true);
  }
});

test("a streamed answer holds its place under the cap until it has ended", { timeout: 20_000 }, async () => {
  const { server, url, guard } = guarded(
    () =>
      sseResponse(
        (async function* () {
          yield { data: "a" };
          await Bun.sleep(300);
          yield { data: "b" };
        })(),
      ),
    { maxRequestsPerAddress: 1 },
  );
  try {
    const res = await fetch(`${url}/v1/chat/completions`, { method: "POST", body: "{}" });
    expect(guard.cap.inFlight("127.0.0.1")).toBe(1);
    expect((await fetch(`${url}/v1/models`)).status).toBe(429);
    expect(await res.text()).toContain("data: b");
    await Bun.sleep(20);
    expect(guard.cap.inFlight("127.0.0.1")).toBe(0);
  } finally {
    server.stop(true);
  }
});

test("an attack's cuts are one log line per window, counting them", async () => {
  const logger = memoryLogger();
  let t = 0;
  const log = tally(logger, "cut", 10_000, () => t);
  log.note("a");
  for (let i = 0; i < 500; i++) log.note(`b${i}`);
  expect(logger.lines).toEqual([expect.objectContaining({ level: "warn", msg: "cut", count: 1, last: "a" })]);
  t = 10_000;
  log.note("c");
  expect(logger.lines).toHaveLength(2);
  expect(logger.lines[1]).toMatchObject({ count: 501, last: "c" });
});
