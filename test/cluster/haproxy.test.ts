import { afterAll, expect, test } from "bun:test";
import type { Subprocess } from "bun";
import { ensureOnnxModel } from "../../models/onnx/cache";
import { startHaproxy, type Haproxy } from "../helpers/haproxy";
import { clusterCli, embedModelToml, nodeCli, nodeConfig, startNode, stopNodes } from "../helpers/nodes";
import { freshDatabase } from "../helpers/postgres";

// The HAProxy helper (test/helpers/haproxy.ts) in front of two tiny backends, each a process of its
// own (Bun.serve answering /health and naming itself): requests through the frontend reach both,
// and once one backend is killed with SIGKILL every request still succeeds on the other — at once
// (a refused connection is redispatched) and after HAProxy's checks mark it DOWN. In front of two
// real appliance nodes on one PostgreSQL, its checks of /health follow the nodes: a drained node
// (503) goes DOWN and takes no requests, and comes back UP once taken back.

const children: Subprocess[] = [];
let proxy: Haproxy | null = null;
afterAll(async () => {
  await proxy?.stop();
  await stopNodes();
  for (const c of children) c.kill("SIGKILL");
  await Promise.all(children.map((c) => c.exited));
});

const BACKEND = `
const name = process.argv.at(-1);
const server = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: (req) => new URL(req.url).pathname === "/health" ? new Response("ok") : Response.json({ name }) });
console.log(server.port);
`;

/** One backend process; resolves with its URL once it listens. */
async function backend(name: string): Promise<{ url: string; child: Subprocess }> {
  const child = Bun.spawn([process.execPath, "-e", BACKEND, name], { stdout: "pipe", stderr: "inherit" });
  children.push(child);
  const reader = (child.stdout as ReadableStream<Uint8Array>).getReader();
  let out = "";
  while (!out.includes("\n")) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`backend ${name} exited before listening`);
    out += new TextDecoder().decode(value);
  }
  return { url: `http://127.0.0.1:${Number(out.trim())}`, child };
}

const who = async (url: string) => {
  const res = await fetch(url);
  expect(res.status).toBe(200);
  return ((await res.json()) as { name: string }).name;
};

test("both backends are used; a backend killed with SIGKILL loses no request, and HAProxy marks it DOWN", async () => {
  const [a, b] = await Promise.all([backend("a"), backend("b")]);
  proxy = await startHaproxy({ backends: [a.url, b.url], balance: "roundrobin" });
  await proxy.waitFor("n0", "UP");
  await proxy.waitFor("n1", "UP");

  const seen = new Set<string>();
  for (let i = 0; i < 10; i++) seen.add(await who(proxy.url));
  expect([...seen].sort()).toEqual(["a", "b"]);

  a.child.kill("SIGKILL");
  await a.child.exited;
  // At once, before any check has failed: a refused connection goes to b.
  const now = await Promise.all(Array.from({ length: 20 }, () => who(proxy!.url)));
  expect(new Set(now)).toEqual(new Set(["b"]));
  await proxy.waitFor("n0", "DOWN", 5_000);
  for (let i = 0; i < 10; i++) expect(await who(proxy.url)).toBe("b");
}, 30_000);

test("stop() ends the haproxy process by its PID and removes its dir", async () => {
  const b = await backend("c");
  const p = await startHaproxy({ backends: [b.url] });
  const { pid, dir } = p;
  await p.stop();
  expect(() => process.kill(pid, 0)).toThrow();
  expect(await Bun.file(`${dir}/haproxy.cfg`).exists()).toBe(false);
  expect(fetch(p.url)).rejects.toThrow();
});

test("in front of two real nodes: a drained node's /health takes it out of rotation, and back in once undrained", async () => {
  const storeUrl = await freshDatabase("cluster_haproxy");
  const config = nodeConfig(embedModelToml("embed", await ensureOnnxModel("embed")));
  clusterCli(config, storeUrl, ["store", "migrate"]);
  const [a, b] = await Promise.all([startNode(config, storeUrl), startNode(config, storeUrl)]);
  const p = await startHaproxy({ backends: [a.url, b.url] });
  try {
    await p.waitFor("n0", "UP");
    await p.waitFor("n1", "UP");
    expect((await nodeCli(a, ["nodes", "drain", a.id])).code).toBe(0);
    // A sees it at its next beat (3 s), then two failed checks (1 s).
    await p.waitFor("n0", "DOWN", 10_000);
    for (let i = 0; i < 5; i++) expect((await fetch(`${p.url}/health`)).status).toBe(200);
    expect((await nodeCli(a, ["nodes", "drain", a.id, "--undo"])).code).toBe(0);
    await p.waitFor("n0", "UP", 10_000);
  } finally {
    await p.stop();
  }
}, 90_000);
