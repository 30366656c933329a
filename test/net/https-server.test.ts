import { afterAll, beforeAll, expect, test } from "bun:test";
import { X509Certificate } from "node:crypto";
import { readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import tls from "node:tls";
import { validateConfig } from "../../src/lib/config";
import { memoryLogger } from "../../src/lib/log";
import { startServer, type RunningServer } from "../../src/main";
import { endRentals, tempDir } from "../helpers/app";
import { cli } from "../helpers/cli";
import { processesOf, rentalConfig, until } from "../api/rentals/setup";

// HTTPS on the main port: `appliance tls init` makes a CA and a server certificate in a temp data
// dir and writes [server.tls]; the server (demo models) serves over Bun's TLS; clients that trust
// only that CA (the official openai and Anthropic SDKs in a child process with
// NODE_EXTRA_CA_CERTS, curl --cacert) work, one without it is refused; the plain-HTTP redirect
// listener; a certificate swapped while a stream runs; a rental's notebook reached through
// https://…/rentals/{id}/ (HTTP and a WebSocket), refused without its token.

const dir = tempDir("appliance-https-");
const logger = memoryLogger();
let server: RunningServer;
let key = "";
let ca = "";
let redirectPort = 0;

beforeAll(async () => {
  const init = cli(dir, ["tls", "init", "--json"]);
  expect(init.code).toBe(0);
  const j = init.json() as { ca: string; cert: string; key: string };
  ca = j.ca;
  const probe = Bun.serve({ port: 0, fetch: () => new Response() });
  redirectPort = probe.port!;
  probe.stop(true);
  const cfg = validateConfig({
    demo: true,
    server: { data_dir: dir, port: 0, tls: { cert: j.cert, key: j.key, redirect_port: redirectPort } },
    engines: { device: "cpu", threads: 1 },
    // A GPU node rented through the real process launcher running the stand-in notebook, reached
    // through this port (rentals.access = "proxy", the default).
    ...rentalConfig({ access: "proxy" }),
  });
  const banner: string[] = [];
  server = await startServer(cfg, { logger, banner: (l) => banner.push(l) });
  key = /(sk-apl-[0-9A-Za-z]{44})/.exec(banner.join("\n"))![1]!;
}, 120_000);
afterAll(async () => {
  if (server) await endRentals(server.deps);
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const url = () => server.url.replace("127.0.0.1", "localhost");

/** The official SDKs in a child process that trusts the CA through NODE_EXTRA_CA_CERTS (or not). */
async function clients(withCa: boolean) {
  const script = `
    import OpenAI from "openai";
    import Anthropic from "@anthropic-ai/sdk";
    const base = process.env.BASE, apiKey = process.env.KEY;
    const openai = new OpenAI({ baseURL: base + "/v1", apiKey, maxRetries: 0 });
    const out = {};
    try {
      const stream = await openai.chat.completions.create({ model: "demo-chat", messages: [{ role: "user", content: "hi" }], max_tokens: 5, stream: true });
      let chunks = 0; for await (const c of stream) chunks++;
      out.chat_chunks = chunks;
      out.responses = (await openai.responses.create({ model: "demo-chat", input: "hi", max_output_tokens: 16 })).object;
      out.embedding = (await openai.embeddings.create({ model: "demo-embed", input: "hello" })).data[0].embedding.length;
      out.file = (await openai.files.create({ file: new File(['{"custom_id":"a","method":"POST","url":"/v1/embeddings","body":{"model":"demo-embed","input":"x"}}\\n'], "b.jsonl"), purpose: "batch" })).status;
      const anthropic = new Anthropic({ baseURL: base, apiKey, maxRetries: 0 });
      out.message = (await anthropic.messages.create({ model: "demo-chat", max_tokens: 5, messages: [{ role: "user", content: "hi" }] })).type;
    } catch (e) { out.error = String(e?.cause?.code ?? e?.code ?? e?.message ?? e); }
    console.log(JSON.stringify(out));
  `;
  const child = Bun.spawn([process.execPath, "-e", script], {
    cwd: join(import.meta.dir, "..", ".."),
    env: { PATH: process.env.PATH ?? "", HOME: dir, BASE: url(), KEY: key, ...(withCa ? { NODE_EXTRA_CA_CERTS: ca } : {}) },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [stdout, stderr] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  try {
    return JSON.parse(stdout.trim().split("\n").pop()!);
  } catch {
    throw new Error(`client output: ${stdout}\n${stderr}`);
  }
}

test("the server listens on https with the certificate tls init made for this host", async () => {
  expect(server.url).toStartWith("https://");
  const peer = await new Promise<X509Certificate>((resolve, reject) => {
    const s = tls.connect({ host: "127.0.0.1", port: server.server.port, ca: readFileSync(ca), servername: "localhost" }, () => {
      resolve(new X509Certificate(s.getPeerX509Certificate()!.raw));
      s.end();
    });
    s.on("error", reject);
  });
  expect(peer.subjectAltName).toContain("DNS:localhost");
  expect(peer.subjectAltName).toContain("IP Address:127.0.0.1");
});

test("the official openai and Anthropic SDKs trusting only the CA: chat stream, responses, embeddings, a batch file upload, messages", async () => {
  expect(await clients(true)).toEqual({ chat_chunks: expect.any(Number), responses: "response", embedding: 384, file: "processed", message: "message" });
}, 60_000);

test("a client that does not trust the CA is refused by its TLS check", async () => {
  const r = await clients(false);
  expect(r.error).toMatch(/UNABLE_TO_VERIFY_LEAF_SIGNATURE|SELF_SIGNED|unable to verify|certificate/i);
}, 60_000);

test("curl with --cacert gets /health; the plain-HTTP listener serves /health and redirects the rest to https", async () => {
  // async: the server answers from this very process
  const curl = Bun.spawn(["curl", "-sS", "--cacert", ca, `${url()}/health`], { stdout: "pipe", stderr: "pipe" });
  const [out, code] = await Promise.all([new Response(curl.stdout).text(), curl.exited]);
  expect(code).toBe(0);
  expect(JSON.parse(out)).toMatchObject({ status: "ok" });
  const untrusted = Bun.spawn(["curl", "-sS", `${url()}/health`], { stdout: "pipe", stderr: "pipe", env: { PATH: process.env.PATH ?? "" } }); // the system store: no such CA
  expect(await untrusted.exited).toBe(60); // curl: peer certificate cannot be authenticated
  const health = await fetch(`http://127.0.0.1:${redirectPort}/health`);
  expect(health.status).toBe(200);
  const other = await fetch(`http://localhost:${redirectPort}/v1/models?x=1`, { redirect: "manual" });
  expect(other.status).toBe(308);
  expect(other.headers.get("location")).toBe(`https://localhost:${server.server.port}/v1/models?x=1`);
});

test("console pages over https carry Strict-Transport-Security", async () => {
  const res = await fetch(`${url()}/console`, { tls: { ca: readFileSync(ca) } } as RequestInit);
  expect(res.status).toBe(200);
  expect(res.headers.get("strict-transport-security")).toBe("max-age=31536000");
});

test("a renewed certificate is served to new connections while a stream on the old one runs to its end", async () => {
  const serialOf = () =>
    new Promise<string>((resolve, reject) => {
      const s = tls.connect({ host: "127.0.0.1", port: server.server.port, ca: readFileSync(ca), servername: "localhost" }, () => {
        resolve(s.getPeerX509Certificate()!.serialNumber);
        s.end();
      });
      s.on("error", reject);
    });
  const before = await serialOf();
  // demo-small-chat: its answers run on to max_tokens (demo-chat's end on their own, often within 100 ms)
  const stream = fetch(`${url()}/v1/chat/completions`, {
    method: "POST",
    tls: { ca: readFileSync(ca) },
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "demo-small-chat", messages: [{ role: "user", content: "tell a long story" }], max_tokens: 200, stream: true }),
  } as RequestInit).then((r) => r.text());
  await Bun.sleep(100);
  expect(cli(dir, ["tls", "renew"]).code).toBe(0);
  server.reloadTls(server.deps.config.server.tls!);
  const after = await serialOf();
  expect(after).not.toBe(before);
  const body = await stream;
  expect(body.trimEnd().endsWith("data: [DONE]")).toBe(true);
}, 60_000);

test("a rental's notebook is reached at https://…/rentals/{id}/ on this port with its token, HTTP and WebSocket; refused without it", async () => {
  const { key: renter } = await server.deps.accounts.createKey({ account: "admin", kind: "premium", name: "renter", scopes: ["inference", "rental"] });
  const call = (method: string, path: string, body?: unknown) =>
    fetch(`${server.url}${path}`, { method, tls: { ca: readFileSync(ca) }, headers: { authorization: `Bearer ${renter}`, "content-type": "application/json" }, ...(body ? { body: JSON.stringify(body) } : {}) } as RequestInit).then((r) => r.json() as Promise<any>);
  const node = (await call("GET", "/api/v1/gpus")).data[0].node_id;
  const created = await call("POST", "/api/v1/rentals", { node_id: node, type: "jupyter" });
  const r = await until(() => call("GET", `/api/v1/rentals/${created.rental_id}`), (x) => x.status === "running");
  expect(r.status).toBe("running");
  const port = server.server.port;
  expect(r.connection.url).toBe(`https://127.0.0.1:${port}/rentals/${r.rental_id}/?token=${r.connection.token}`);
  // The notebook server itself listens on loopback only, on a port of its own that the API never names.
  const args = processesOf(r.rental_id).map((pid) => readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0"));
  expect(args.some((a) => a.includes("--ip=127.0.0.1") && a.includes(`--ServerApp.base_url=/rentals/${r.rental_id}/`))).toBe(true);

  const get = (path: string, headers: Record<string, string> = {}) => fetch(`https://127.0.0.1:${port}${path}`, { tls: { ca: readFileSync(ca) }, headers, redirect: "manual" } as RequestInit);
  const lab = await get(`/rentals/${r.rental_id}/lab?token=${r.connection.token}`);
  expect(lab.status).toBe(200);
  expect(await lab.json()).toMatchObject({ lab: true });
  const access = lab.headers.getSetCookie().find((c) => c.startsWith("appliance_rental="))!;
  expect(access).toContain("Secure");
  expect((await get(`/rentals/${r.rental_id}/lab`)).status).toBe(401);
  expect((await get(`/rentals/${r.rental_id}/lab?token=wrong`)).status).toBe(401);
  // With the cookies a browser would now hold, no token.
  const cookies = lab.headers.getSetCookie().map((c) => c.split(";")[0]).join("; ");
  expect((await get(`/rentals/${r.rental_id}/lab`, { cookie: cookies })).status).toBe(200);

  const ws = new WebSocket(`wss://127.0.0.1:${port}/rentals/${r.rental_id}/api/kernels/k1/channels?token=${r.connection.token}`, { tls: { ca: readFileSync(ca) } } as any);
  await new Promise((resolve, reject) => ((ws.onopen = resolve), (ws.onerror = reject)));
  const echoed = new Promise((resolve) => (ws.onmessage = (e) => resolve(e.data)));
  ws.send("over tls");
  expect(await echoed).toBe("echo:over tls");
  ws.close();
  const refused = new WebSocket(`wss://127.0.0.1:${port}/rentals/${r.rental_id}/api/kernels/k1/channels`, { tls: { ca: readFileSync(ca) } } as any);
  expect(await new Promise((resolve) => ((refused.onopen = () => resolve("open")), (refused.onerror = () => resolve("refused"))))).toBe("refused");
  expect(JSON.stringify(logger.lines)).not.toContain(r.connection.token);
}, 60_000);
