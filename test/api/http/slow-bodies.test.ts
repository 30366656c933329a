import { afterAll, expect, test } from "bun:test";
import { rmSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { join } from "node:path";
import { raiseFdLimit, readFdLimit } from "../../../src/lib/net/rlimit";
import { tempDir } from "../../helpers/app";
import { CLI, cli, untilListening } from "../../helpers/cli";

// Issue 41 H3, replayed on a real server process: POST bodies that trickle in (one byte every two
// seconds) to /console/api/login, which needs no key, and to /v1/chat/completions and /v1/files
// with a key. Each one once held its connection and a file descriptor for ever; ~20k of them
// reached the process's limit and the server answered nothing. Now a body that falls behind its
// pace is answered 408 and its connection closed, and one address holds at most
// server.max_requests_per_address requests.
// Loopback is not exempt: the test's clients use 127.0.0.2-5 (Linux routes all of 127/8 to lo),
// so that each address stays under the default cap of 256 where it should.

const GRACE_S = 4;
const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

async function startServer(o: { fdLimit?: number; key?: boolean } = {}) {
  const dir = tempDir("appliance-slow-bodies-");
  dirs.push(dir);
  const config = join(dir, "config.toml");
  writeFileSync(config, [`[server]`, `body_grace_s = ${GRACE_S}`, `shutdown_timeout_s = 1`, `[rentals]`, `discover = false`].join("\n"));
  const env = { PATH: process.env.PATH ?? "", HOME: dir, APPLIANCE_DATA_DIR: dir, APPLIANCE_CONFIG: config };
  let key: string | undefined;
  if (o.key) {
    expect(cli(dir, ["accounts", "create", "u", "--credit", "10"], env).code).toBe(0);
    key = cli(dir, ["keys", "create", "--account", "u", "--premium", "--json"], env).json().key as string;
  }
  // `ulimit -n` sets the soft and the hard limit: the server cannot raise it past that.
  const limit = o.fdLimit ? `ulimit -n ${o.fdLimit} && ` : "";
  const child = Bun.spawn(["sh", "-c", `${limit}exec "$0" "$@"`, process.execPath, CLI, "serve", "--port", "0"], { env, stdout: "pipe", stderr: "pipe" });
  const { url } = await untilListening(child.stderr);
  const out: string[] = [];
  void (async () => {
    for await (const chunk of child.stdout as ReadableStream<Uint8Array>) out.push(new TextDecoder().decode(chunk));
  })();
  const logs = () =>
    out
      .join("")
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Record<string, any>);
  return { url, port: Number(new URL(url).port), key, logs, stop: () => (child.kill(), child.exited) };
}

interface Trickle {
  /** The head has been written. */
  sent: Promise<void>;
  /** What came back, and when the connection closed (ms after the head was written). */
  done: Promise<{ text: string; closedAfterMs: number }>;
}

/** One connection: a POST head announcing 1000 bytes, then a byte every two seconds, from `from`. */
function trickle(port: number, from: string, path: string, headers: string[] = []): Trickle {
  const sent = Promise.withResolvers<void>();
  const done = new Promise<{ text: string; closedAfterMs: number }>((resolve) => {
    let text = "";
    let headAt = 0;
    const s = connect({ port, host: "127.0.0.1", localAddress: from });
    let timer: ReturnType<typeof setInterval> | undefined;
    s.on("connect", () => {
      const type = headers.some((h) => h.startsWith("Content-Type:")) ? [] : ["Content-Type: application/json"];
      s.write([`POST ${path} HTTP/1.1`, `Host: 127.0.0.1:${port}`, ...type, "Content-Length: 1000", ...headers, "", "{"].join("\r\n"));
      headAt = performance.now();
      sent.resolve();
      timer = setInterval(() => s.destroyed || s.write(" "), 2000);
    });
    s.on("data", (d) => (text += d.toString("latin1")));
    s.on("error", () => {});
    s.on("close", () => {
      clearInterval(timer);
      sent.resolve();
      resolve({ text, closedAfterMs: performance.now() - headAt });
    });
    // the test's own bound: a connection nobody cuts is given up on after this
    setTimeout(() => s.destroy(), (GRACE_S + 12) * 1000);
  });
  return { sent: sent.promise, done };
}

/** How long `f` takes, in ms, with what it returned. */
async function timed<T>(f: () => Promise<T>): Promise<{ ms: number; value: T }> {
  const t0 = performance.now();
  const value = await f();
  return { ms: performance.now() - t0, value };
}

/** The test process holds one descriptor per connection too. */
function ensureFds(n: number) {
  raiseFdLimit();
  expect(readFdLimit()!.soft).toBeGreaterThanOrEqual(n);
}

test("600 trickling bodies are cut with 408 once their grace is over, and a normal request is answered at once while they are held", { timeout: 60_000 }, async () => {
  ensureFds(2048);
  const server = await startServer({ key: true });
  try {
    const auth = `Authorization: Bearer ${server.key}`;
    const trickles: Trickle[] = [];
    for (const from of ["127.0.0.2", "127.0.0.3", "127.0.0.4"]) {
      for (let i = 0; i < 200; i++) {
        if (i % 6 === 5) trickles.push(trickle(server.port, from, "/v1/chat/completions", [auth]));
        // a file upload's multipart body is streamed to disk as it comes (src/2-services/files/multipart.ts): it is paced all the same
        else if (i % 6 === 4) trickles.push(trickle(server.port, from, "/v1/files", [auth, "Content-Type: multipart/form-data; boundary=b"]));
        else trickles.push(trickle(server.port, from, "/console/api/login"));
      }
    }
    // one more address over the default cap (256): loopback is counted like any address
    const capped = Array.from({ length: 260 }, () => trickle(server.port, "127.0.0.5", "/console/api/login"));
    await Promise.all([...trickles, ...capped].map((t) => t.sent));
    await Bun.sleep(300);

    // While they are held: another client's requests are answered promptly.
    const health = await timed(() => fetch(`${server.url}/health`).then((r) => r.status));
    expect(health.value).toBe(200);
    expect(health.ms).toBeLessThan(2000);
    const chat = await timed(() =>
      fetch(`${server.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${server.key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "no-such-model", messages: [{ role: "user", content: "hi" }] }),
      }).then(async (r) => ({ status: r.status, body: await r.json() })),
    );
    expect(chat.value.status).toBe(404); // its body was read: the model it names is not served
    expect(chat.value.body.error.code).toBe("model_not_found");
    expect(chat.ms).toBeLessThan(2000);

    // Every trickling body is cut: a 408 in the OpenAI shape, then the connection closed, between
    // the end of its grace and a few seconds later (the sweep runs every second; the box is busy).
    const results = await Promise.all([...trickles, ...capped].map((t) => t.done));
    const cut = results.filter((r) => r.text.startsWith("HTTP/1.1 408"));
    expect(cut).toHaveLength(600 + 256);
    for (const r of cut) {
      expect(r.text.toLowerCase()).toContain("connection: close");
      expect(JSON.parse(r.text.slice(r.text.indexOf("\r\n\r\n") + 4)).error).toMatchObject({ code: "request_timeout", type: "invalid_request_error" });
    }
    const times = cut.map((r) => r.closedAfterMs).sort((a, b) => a - b);
    expect(times[0]!).toBeGreaterThan((GRACE_S - 0.5) * 1000);
    expect(times.at(-1)!).toBeLessThan((GRACE_S + 6) * 1000);

    // The address over the cap got its last 4 refused at once: 429, Connection: close, Retry-After.
    const refused = results.filter((r) => r.text.startsWith("HTTP/1.1 429"));
    expect(refused).toHaveLength(4);
    for (const r of refused) {
      expect(r.text.toLowerCase()).toContain("connection: close");
      expect(r.text.toLowerCase()).toContain("retry-after: 1");
      expect(JSON.parse(r.text.slice(r.text.indexOf("\r\n\r\n") + 4)).error).toMatchObject({ code: "concurrency_limit_exceeded", type: "rate_limit_error" });
      expect(r.closedAfterMs).toBeLessThan(2000);
    }

    // The server is well, and said what happened in a line or two, not 856.
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
    await Bun.sleep(300); // stdout is flushed every 100 ms
    const warned = server.logs().filter((l) => String(l.msg).startsWith("request bodies too slow"));
    expect(warned.length).toBeGreaterThanOrEqual(1);
    expect(warned.length).toBeLessThanOrEqual(2);
    const refusedLines = server.logs().filter((l) => String(l.msg).startsWith("requests refused: too many in flight"));
    expect(refusedLines.length).toBeGreaterThanOrEqual(1);
    expect(refusedLines.length).toBeLessThanOrEqual(2);
  } finally {
    await server.stop();
  }
});

test("with 512 descriptors, 600 trickling bodies from one address leave the server answering: the address's cap refuses what would exhaust them", { timeout: 60_000 }, async () => {
  ensureFds(1024);
  const server = await startServer({ fdLimit: 512 });
  try {
    // the limit the server runs under is in its start log
    for (let i = 0; i < 50 && !server.logs().some((l) => l.msg === "file descriptor limit"); i++) await Bun.sleep(100); // stdout is flushed every 100 ms
    expect(server.logs().find((l) => l.msg === "file descriptor limit")).toMatchObject({ soft: 512, hard: 512 });
    const trickles = Array.from({ length: 600 }, () => trickle(server.port, "127.0.0.2", "/console/api/login"));
    await Promise.all(trickles.map((t) => t.sent));
    await Bun.sleep(500);
    const health = await timed(() =>
      fetch(`${server.url}/health`, { signal: AbortSignal.timeout(5000) }).then(
        (r) => r.status,
        () => "no answer in 5 s",
      ),
    );
    expect(health.value).toBe(200);
    expect(health.ms).toBeLessThan(2000);
    const results = await Promise.all(trickles.map((t) => t.done));
    expect(results.filter((r) => r.text.startsWith("HTTP/1.1 429"))).toHaveLength(600 - 256);
    expect(results.filter((r) => r.text.startsWith("HTTP/1.1 408"))).toHaveLength(256);
  } finally {
    await server.stop();
  }
});
