import { expect } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";

/** One request a client sent, as it reached the server (credentials left out), and the status it got. */
export interface Recorded {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: unknown;
  status: number;
  /** A refused request's answer (its start): what the server said, for the assertion's message. */
  answer?: string;
}

/** Credentials, and what changes on every run (the proxy's port, the body's length). */
const LEFT_OUT_HEADERS = new Set(["authorization", "x-api-key", "cookie", "host", "content-length"]);

/**
 * An HTTP proxy in front of `target` that keeps every request a client sends and the status it
 * was answered with, streaming the answer through unchanged: what a real client sends is then
 * both asserted on and kept as a fixture.
 */
export interface RecordingProxy {
  url: string;
  requests: Recorded[];
  /** Runs `fn` and gives the requests recorded meanwhile (one test at a time). */
  recording<T>(fn: () => Promise<T>): Promise<{ result: T; sent: Recorded[] }>;
  stop(): void;
}

export function recordingProxy(target: string): RecordingProxy {
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
        if (!LEFT_OUT_HEADERS.has(k)) kept[k] = v;
      });
      // A refusal is short: read whole, so the assertion can say why (an answer is streamed through untouched).
      // (bytes kept as they came: a compressed one is passed on as it is, its message unreadable)
      const refused = answer.status >= 300 ? new Uint8Array(await answer.arrayBuffer()) : null;
      const said = refused && !answer.headers.get("content-encoding") ? new TextDecoder().decode(refused).slice(0, 400) : undefined;
      requests.push({ method: req.method, path: url.pathname + url.search, headers: kept, body, status: answer.status, ...(said !== undefined ? { answer: said } : {}) });
      return new Response(refused ?? answer.body, { status: answer.status, headers: answer.headers });
    },
  });
  return {
    url: `http://127.0.0.1:${server.port}`,
    requests,
    async recording(fn) {
      const from = requests.length;
      const result = await fn();
      return { result, sent: requests.slice(from) };
    },
    stop: () => server.stop(true),
  };
}

/**
 * Writes one recorded request ({method, path, headers, body}) to test/fixtures/requests/<name>
 * for the translation tests — only with APPLIANCE_RECORD_FIXTURES=1, so an ordinary run never
 * rewrites the fixtures.
 */
export function keepFixture(name: string, r: Recorded) {
  if (process.env.APPLIANCE_RECORD_FIXTURES !== "1") return;
  writeFileSync(join(import.meta.dir, "../fixtures/requests", name), JSON.stringify({ method: r.method, path: r.path, headers: r.headers, body: r.body }, null, 1) + "\n");
}

/** At least one request was sent, and every one was answered 2xx (the refused ones listed if not). */
export function expectAnswered(sent: Recorded[]) {
  expect(sent.length).toBeGreaterThan(0);
  expect(sent.filter((r) => r.status >= 300).map((r) => `${r.method} ${r.path} → ${r.status} ${r.answer ?? ""}`)).toEqual([]);
}

/**
 * A chat-completions tool round trip as a framework runs it: the tool ran with object arguments
 * (each a `word` string), and the second request carried its result back, every request 2xx.
 */
export function expectToolRoundTrip(calls: unknown[], sent: Recorded[]) {
  expect(calls.length).toBeGreaterThan(0);
  for (const c of calls) expect(typeof (c as { word: unknown }).word).toBe("string");
  const chat = sent.filter((r) => r.path === "/v1/chat/completions");
  expect(chat.length).toBe(2);
  expect((chat[1]!.body as { messages: { role: string }[] }).messages.some((m) => m.role === "tool")).toBe(true);
  expectAnswered(sent);
}
