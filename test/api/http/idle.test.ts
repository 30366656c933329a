import { expect, test } from "bun:test";
import { liftIdleTimeout, runsWork } from "../../../src/api/http/idle";

// The listener's idle timeout and streams that go quiet (src/api/http/idle.ts). A real chat
// stream only goes quiet for long on slow hardware (a long prompt, steps behind others' prompts),
// so the mechanism is shown on a plain Bun listener with a 1 s timeout and a body that stalls 9 s,
// through the same function the appliance's listener calls (src/main.ts). (Bun checks idle sockets
// on a 4 s tick: a 1 s timeout cuts a quiet stream after 4 to 8 s.)

function stallingServer() {
  return Bun.serve({
    port: 0,
    idleTimeout: 1,
    fetch(req, server) {
      liftIdleTimeout(req, server);
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
    },
  });
}

test("work (POST) is exempt from the idle timeout; other requests are not", () => {
  expect(runsWork(new Request("http://x/v1/chat/completions", { method: "POST", body: "{}" }))).toBe(true);
  expect(runsWork(new Request("http://x/v1/models"))).toBe(false);
});

test("a stream that goes quiet longer than the idle timeout survives when it runs work, and is cut otherwise", { timeout: 20_000 }, async () => {
  const server = stallingServer();
  try {
    const url = `http://127.0.0.1:${server.port}/stream`;
    const [post, get] = await Promise.all([
      fetch(url, { method: "POST", body: "{}", keepalive: false }).then((r) => r.text()),
      // the same stream on a GET is cut: what every chat stream got before
      fetch(url, { keepalive: false })
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
