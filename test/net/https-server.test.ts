import { afterAll, beforeAll, expect, test } from "bun:test";
import { X509Certificate } from "node:crypto";
import { readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import tls from "node:tls";
import { validateConfig } from "../../src/config";
import { memoryLogger } from "../../src/log";
import { startServer, type RunningServer } from "../../src/main";
import { tempDir } from "../helpers/app";
import { cli } from "../helpers/cli";

// HTTPS on the main port: `appliance tls init` makes a CA and a server certificate in a temp data
// dir and writes [server.tls]; the server (demo models) serves over Bun's TLS; clients that trust
// only that CA (the official openai and Anthropic SDKs in a child process with
// NODE_EXTRA_CA_CERTS, curl --cacert) work, one without it is refused; the plain-HTTP redirect
// listener; a certificate swapped while a stream runs.

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
    rentals: { discover: false },
  });
  const banner: string[] = [];
  server = await startServer(cfg, { logger, banner: (l) => banner.push(l) });
  key = /(sk-apl-[0-9A-Za-z]{44})/.exec(banner.join("\n"))![1]!;
}, 120_000);
afterAll(async () => {
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
  const stream = fetch(`${url()}/v1/chat/completions`, {
    method: "POST",
    tls: { ca: readFileSync(ca) },
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "demo-chat", messages: [{ role: "user", content: "tell a long story" }], max_tokens: 200, stream: true }),
  } as RequestInit).then((r) => r.text());
  await Bun.sleep(100);
  expect(cli(dir, ["tls", "renew"]).code).toBe(0);
  server.reloadTls(server.deps.config.server.tls!);
  const after = await serialOf();
  expect(after).not.toBe(before);
  const body = await stream;
  expect(body.trimEnd().endsWith("data: [DONE]")).toBe(true);
}, 60_000);
