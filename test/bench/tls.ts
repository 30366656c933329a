// Benchmark (issue 27, HTTPS on the main port): the same server started twice in one process,
// once over plain HTTP and once over HTTPS with a certificate from `appliance tls init`'s code
// (a local CA in a temp dir), same config and same tiny chat model. Measured side by side in
// interleaved rounds (the order flips every round; a shared 2-core box drifts within a minute):
//   (a) authenticated GET /v1/models per second from N concurrent keep-alive clients;
//   (b) time to the first content event of a small streamed chat completion, on a warm connection.
// Targets: rps TLS/plain ≥ 0.85 (median of per-round ratios); TTFT TLS − plain ≤ 2 ms (median of
// per-pair differences). Also printed, not judged: a request on a new connection (TCP, and for
// TLS the handshake), and the connections the server held open during (a), which shows that the
// clients kept theirs alive.
import { readFileSync, rmSync } from "node:fs";
import tls from "node:tls";
import { ensureChatModel } from "../../models/cache";
import { validateConfig } from "../../src/lib/config";
import { createLogger } from "../../src/lib/log";
import { startServer, type RunningServer } from "../../src/main";
import { ensureCa, issueServerCert, tlsPaths } from "../../src/lib/net/tls-ca";
import { tempDir } from "../helpers/app";
import { readSseEvents } from "./sse-client";
import { median } from "./stats";

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 10);
const ROUND_MS = Number(process.env.BENCH_ROUND_MS ?? 1000);
const CLIENTS = Number(process.env.BENCH_CLIENTS ?? 8);
const THREADS = Number(process.env.BENCH_THREADS ?? 1);
/** Chat streams per side in each round. */
const STREAMS = 3;
const NEW_CONNECTIONS = 20;

interface Side {
  name: "plain" | "tls";
  server: RunningServer;
  key: string;
  /** Keep-alive connections, trusting only the test CA on the TLS side. */
  session: Bun.FetchSession;
  /** A connection per request. */
  oneShot: Bun.FetchSession;
}

async function startSide(name: Side["name"], modelPath: string, cert?: { cert: string; key: string; ca: string }): Promise<Side> {
  const dir = tempDir(`appliance-bench-tls-${name}-`);
  const config = validateConfig({
    server: { data_dir: dir, port: 0, log_level: "warn", ...(cert ? { tls: { cert: cert.cert, key: cert.key } } : {}) },
    engines: { device: "cpu", threads: THREADS },
    bootstrap: { credit_usd: 1000 },
    rentals: { discover: false },
    models: [{ id: "bench", name: "bench", kind: "chat", files: { model: modelPath }, max_context: 1024, slots: 1, load: "start" }],
  });
  let key = "";
  const server = await startServer(config, { logger: createLogger({ level: "warn" }), banner: (l) => (key ||= /sk-apl-[0-9A-Za-z]{44}/.exec(l)?.[0] ?? "") });
  const tlsOptions = cert ? { tls: { ca: readFileSync(cert.ca, "utf8") } } : {};
  return { name, server, key, session: new Bun.FetchSession({ ...tlsOptions, keepAlive: true }), oneShot: new Bun.FetchSession({ ...tlsOptions, keepAlive: false }) };
}

/** The certificate names localhost, as clients would call the host; plain HTTP gets the same name. */
const baseUrl = (s: Side) => s.server.url.replace("127.0.0.1", "localhost");

/** Server-side TCP connections in ESTABLISHED state on `port` (from /proc/net/tcp and tcp6). */
function establishedOn(port: number): number {
  const hex = `:${port.toString(16).toUpperCase().padStart(4, "0")}`;
  let n = 0;
  for (const file of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text = "";
    try {
      text = readFileSync(file, "utf8");
    } catch {
      continue;
    }
    for (const line of text.split("\n").slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f[1]?.endsWith(hex) && f[3] === "01") n++;
    }
  }
  return n;
}

/** (a) Requests per second over ROUND_MS from CLIENTS concurrent loops; also the connections open at the end. */
async function modelsRps(s: Side): Promise<{ rps: number; connections: number }> {
  const headers = { authorization: `Bearer ${s.key}` };
  const url = `${baseUrl(s)}/v1/models`;
  const t0 = performance.now();
  const end = t0 + ROUND_MS;
  let done = 0;
  await Promise.all(
    Array.from({ length: CLIENTS }, async () => {
      while (performance.now() < end) {
        const res = await s.session.fetch(url, { headers });
        if (res.status !== 200) throw new Error(`${s.name}: GET /v1/models ${res.status} ${await res.text()}`);
        await res.arrayBuffer();
        done++;
      }
    }),
  );
  const elapsed = performance.now() - t0;
  return { rps: done / (elapsed / 1000), connections: establishedOn(s.server.server.port!) };
}

const CHAT_BODY = JSON.stringify({
  model: "bench",
  stream: true,
  max_tokens: 8,
  temperature: 0,
  chat_template_kwargs: { enable_thinking: false },
  messages: [{ role: "user", content: "Please write a short paragraph about bridges." }],
});

/** (b) Milliseconds from sending the request to the first content event; the stream is read to its end. */
async function chatTtft(s: Side): Promise<number> {
  const t0 = performance.now();
  const res = await s.session.fetch(`${baseUrl(s)}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${s.key}`, "content-type": "application/json" },
    body: CHAT_BODY,
  });
  if (res.status !== 200) throw new Error(`${s.name}: chat ${res.status} ${await res.text()}`);
  let first = 0;
  await readSseEvents(res, (e, now) => {
    if (!first && e.choices?.[0]?.delta?.content) first = now;
  });
  if (!first) throw new Error(`${s.name}: the stream had no content event`);
  return first - t0;
}

/** Milliseconds for GET /health on a connection of its own (connect, TLS handshake, request). */
async function newConnectionMs(s: Side): Promise<number> {
  const t0 = performance.now();
  const res = await s.oneShot.fetch(`${baseUrl(s)}/health`);
  await res.arrayBuffer();
  if (res.status !== 200) throw new Error(`${s.name}: /health ${res.status}`);
  return performance.now() - t0;
}

/** What a client negotiates with the TLS side: protocol and cipher. */
function negotiated(s: Side, ca: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const sock = tls.connect({ host: "127.0.0.1", port: s.server.server.port!, servername: "localhost", ca: readFileSync(ca) }, () => {
      const c = sock.getCipher();
      resolve(`${sock.getProtocol()}, ${c.standardName ?? c.name}`);
      sock.end();
    });
    sock.on("error", reject);
  });
}


export async function benchTls() {
  const modelPath = await ensureChatModel("chat");
  const caDir = tempDir("appliance-bench-tls-ca-");
  const paths = tlsPaths(caDir);
  ensureCa(paths);
  const issued = issueServerCert(paths, { names: ["localhost"], addresses: ["127.0.0.1"] });
  const plain = await startSide("plain", modelPath);
  const secure = await startSide("tls", modelPath, { cert: issued.cert, key: issued.key, ca: issued.ca });
  const sides = [plain, secure];
  const r = {
    rps: { plain: [] as number[], tls: [] as number[] },
    conns: { plain: [] as number[], tls: [] as number[] },
    ttft: { plain: [] as number[], tls: [] as number[] },
    fresh: { plain: [] as number[], tls: [] as number[] },
  };
  let cipher = "";
  try {
    cipher = await negotiated(secure, issued.ca);
    for (const s of sides) {
      // Warm-up: connections opened, the model's first step and the slot's prompt cache filled.
      await modelsRps(s);
      for (let i = 0; i < STREAMS; i++) await chatTtft(s);
    }
    for (let round = 0; round < ROUNDS; round++) {
      const order = round % 2 ? [secure, plain] : [plain, secure];
      for (const s of order) {
        const { rps, connections } = await modelsRps(s);
        r.rps[s.name].push(rps);
        r.conns[s.name].push(connections);
      }
      for (let i = 0; i < STREAMS; i++) for (const s of (round + i) % 2 ? [secure, plain] : [plain, secure]) r.ttft[s.name].push(await chatTtft(s));
      for (let i = 0; i < NEW_CONNECTIONS / ROUNDS; i++) for (const s of order) r.fresh[s.name].push(await newConnectionMs(s));
    }
  } finally {
    for (const s of sides) {
      s.session.close();
      s.oneShot.close();
      await s.server.stop();
      rmSync(s.server.deps.config.server.data_dir, { recursive: true, force: true });
    }
    rmSync(caDir, { recursive: true, force: true });
  }
  const rpsRatio = median(r.rps.tls.map((t, i) => t / r.rps.plain[i]!));
  const ttftDelta = median(r.ttft.tls.map((t, i) => t - r.ttft.plain[i]!));
  const rpsOk = rpsRatio >= 0.85;
  const ttftOk = ttftDelta <= 2;
  console.log(
    `plain HTTP vs HTTPS (${cipher}; P-256 certificate from tls init's CA), tiny chat model, ${THREADS} engine thread(s); ` +
      `${ROUNDS} interleaved rounds of ${ROUND_MS} ms (medians)`,
  );
  console.log(`                 GET /v1/models rps, ${CLIENTS} keep-alive clients   server connections   chat ttft ms (warm conn.)   new connection + GET /health ms`);
  for (const name of ["plain", "tls"] as const) {
    console.log(
      `${name.padEnd(17)}${median(r.rps[name]).toFixed(0).padStart(38)}${median(r.conns[name]).toFixed(0).padStart(21)}` +
        `${median(r.ttft[name]).toFixed(2).padStart(28)}${median(r.fresh[name]).toFixed(2).padStart(34)}`,
    );
  }
  console.log(`rps TLS/plain ${rpsRatio.toFixed(3)} (target ≥ 0.85) ${rpsOk ? "PASS" : "FAIL"}`);
  console.log(`chat ttft TLS − plain ${ttftDelta.toFixed(2)} ms (target ≤ 2 ms) ${ttftOk ? "PASS" : "FAIL"}`);
  console.log(`new connection TLS − plain ${(median(r.fresh.tls) - median(r.fresh.plain)).toFixed(2)} ms (the handshake; not a target)`);
  return { pass: rpsOk && ttftOk };
}
