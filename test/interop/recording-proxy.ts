/** One request a client sent, as it reached the server (credentials left out), and the status it got. */
export interface Recorded {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: unknown;
  status: number;
}

const SECRET_HEADERS = new Set(["authorization", "x-api-key", "cookie"]);

/**
 * An HTTP proxy in front of `target` that keeps every request a client sends and the status it
 * was answered with, streaming the answer through unchanged: what a real client sends is then
 * both asserted on and kept as a fixture.
 */
export function recordingProxy(target: string): { url: string; requests: Recorded[]; stop(): void } {
  const requests: Recorded[] = [];
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    idleTimeout: 0,
    async fetch(req) {
      const url = new URL(req.url);
      const text = req.method === "GET" || req.method === "HEAD" ? "" : await req.text();
      const headers = new Headers(req.headers);
      headers.delete("host");
      const answer = await fetch(target + url.pathname + url.search, { method: req.method, headers, body: text || undefined, decompress: false });
      let body: unknown = text || null;
      try {
        body = text ? JSON.parse(text) : null;
      } catch {}
      const kept: Record<string, string> = {};
      req.headers.forEach((v, k) => {
        if (!SECRET_HEADERS.has(k)) kept[k] = v;
      });
      requests.push({ method: req.method, path: url.pathname + url.search, headers: kept, body, status: answer.status });
      return new Response(answer.body, { status: answer.status, headers: answer.headers });
    },
  });
  return { url: `http://127.0.0.1:${server.port}`, requests, stop: () => server.stop(true) };
}
