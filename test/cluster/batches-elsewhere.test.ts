import { afterAll, beforeAll, expect, test } from "bun:test";
import { SQL, type Subprocess } from "bun";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import OpenAI, { toFile } from "openai";
import { ensureOnnxModel } from "../../models/onnx/cache";
import { tempDir } from "../helpers/app";
import { cli, serveCli } from "../helpers/cli";
import { freshDatabase, nodeEnv } from "../helpers/postgres";

// Issue 45, batches across nodes that serve different models: two real nodes on one PostgreSQL,
// node A serving "embed" and node B "embed-b" (the same generated ONNX files under another id). A
// batch of embed-b lines created through A is accepted (a live node serves its model), and its
// lines are run by B only: A leaves them (it would fail them with model_not_found), so every line
// completes, each charged once.

const dirs: string[] = [];
const children: Subprocess[] = [];
/** Each node's process by its index (children is in the order they listened). */
const nodeChildren: Subprocess[] = [];
let url = "";
let sql: SQL;
let key = "";
let nodes: string[] = [];
const nodeDirs: string[] = [];
let modelFile = "";

afterAll(async () => {
  for (const c of children) c.kill("SIGKILL");
  await Promise.all(children.map((c) => c.exited));
  await sql?.close();
  dirs.forEach((d) => rmSync(d, { recursive: true, force: true }));
});

function configFor(dir: string, id: string, model: string): string {
  const path = join(dir, "config.toml");
  writeFileSync(path, ["[engines]", 'device = "cpu"', "threads = 1", "[[models]]", `id = "${id}"`, 'name = "Tiny embed"', 'kind = "embedding"', "max_context = 512", `files = { model = ${JSON.stringify(model)} }`, ""].join("\n"));
  return path;
}

beforeAll(async () => {
  url = await freshDatabase("cluster_batches");
  sql = new SQL({ url, max: 2 });
  const model = await ensureOnnxModel("embed");
  const admin = tempDir("appliance-cluster-cli-");
  dirs.push(admin);
  const adminEnv = { APPLIANCE_CONFIG: configFor(admin, "embed", model), ...nodeEnv(url) };
  for (const args of [["store", "migrate"], ["accounts", "create", "team", "--credit", "5"]]) expect(cli(admin, args, adminEnv).code).toBe(0);
  key = cli(admin, ["keys", "create", "--account", "team", "--premium", "--json"], adminEnv).json<{ key: string }>().key;
  modelFile = model;
  nodes = await Promise.all(
    (["embed", "embed-b"] as const).map(async (id, i) => {
      const dir = tempDir(`appliance-cluster-${i}-`);
      dirs.push(dir);
      nodeDirs.push(dir);
      const s = await serveCli(dir, ["--port", "0"], { APPLIANCE_CONFIG: configFor(dir, id, model), ...nodeEnv(url) });
      children.push(s.child);
      nodeChildren[i] = s.child;
      for (const stream of [s.child.stdout, s.child.stderr] as ReadableStream<Uint8Array>[])
        void (async () => {
          for await (const _ of stream);
        })().catch(() => {});
      return s.url;
    }),
  );
  // Each node has read the other's models (at its first beat after both registered).
  await Bun.sleep(3_500);
}, 180_000);

test("a batch of a model only node B serves, created through node A: B runs every line, A fails none", async () => {
  const a = new OpenAI({ apiKey: key, baseURL: `${nodes[0]}/v1`, maxRetries: 0 });
  const lines = Array.from({ length: 30 }, (_, i) => JSON.stringify({ custom_id: `l${i}`, method: "POST", url: "/v1/embeddings", body: { model: "embed-b", input: `line ${i}` } }));
  const file = await a.files.create({ file: await toFile(Buffer.from(lines.join("\n") + "\n"), "in.jsonl"), purpose: "batch" });
  const created = await a.batches.create({ input_file_id: file.id, endpoint: "/v1/embeddings", completion_window: "24h" });
  let done = await a.batches.retrieve(created.id);
  for (const end = Date.now() + 60_000; !["completed", "failed", "expired", "cancelled"].includes(done.status); done = await a.batches.retrieve(created.id)) {
    if (Date.now() > end) throw new Error(`batch still ${done.status}`);
    await Bun.sleep(200);
  }
  expect(done.status).toBe("completed");
  expect(done.request_counts).toEqual({ total: 30, completed: 30, failed: 0 });
  const [{ n }] = await sql`SELECT COUNT(*) AS n FROM usage WHERE batch = 1 AND model = 'embed-b'`;
  expect(Number(n)).toBe(30);
}, 90_000);

test("a line node B died running is left to B by node A, and run when B is back", async () => {
  const a = new OpenAI({ apiKey: key, baseURL: `${nodes[0]}/v1`, maxRetries: 0 });
  // B dies; its row stays live for the lease (15 s): A still counts embed-b as B's.
  nodeChildren[1]!.kill("SIGKILL");
  await nodeChildren[1]!.exited;
  const lines = Array.from({ length: 4 }, (_, i) => JSON.stringify({ custom_id: `s${i}`, method: "POST", url: "/v1/embeddings", body: { model: "embed-b", input: `line ${i}` } }));
  const file = await a.files.create({ file: await toFile(Buffer.from(lines.join("\n") + "\n"), "in.jsonl"), purpose: "batch" });
  const created = await a.batches.create({ input_file_id: file.id, endpoint: "/v1/embeddings", completion_window: "24h" });
  for (let b = await a.batches.retrieve(created.id); b.status !== "in_progress"; b = await a.batches.retrieve(created.id)) await Bun.sleep(100);
  // As B would have left it had it died running line 1: a suspect, started once.
  await sql`UPDATE batch_lines SET starts = 1 WHERE batch_id = ${created.id} AND line = 1`;
  await Bun.sleep(2_500); // several of A's worker ticks
  const rows = await sql`SELECT line, state, starts, lease_owner FROM batch_lines WHERE batch_id = ${created.id} ORDER BY line`;
  expect(rows.map((r: { state: string; starts: number; lease_owner: string | null }) => [r.state, Number(r.starts), r.lease_owner])).toEqual([
    ["pending", 1, null],
    ["pending", 0, null],
    ["pending", 0, null],
    ["pending", 0, null],
  ]);
  // B back (same data dir: the same node): it runs them all, the suspect alone first.
  const s = await serveCli(nodeDirs[1]!, ["--port", "0"], { APPLIANCE_CONFIG: configFor(nodeDirs[1]!, "embed-b", modelFile), ...nodeEnv(url) });
  children.push(s.child);
  for (const stream of [s.child.stdout, s.child.stderr] as ReadableStream<Uint8Array>[])
    void (async () => {
      for await (const _ of stream);
    })().catch(() => {});
  let done = await a.batches.retrieve(created.id);
  for (const end = Date.now() + 60_000; done.status !== "completed"; done = await a.batches.retrieve(created.id)) {
    if (Date.now() > end) throw new Error(`batch still ${done.status}`);
    await Bun.sleep(200);
  }
  expect(done.request_counts).toEqual({ total: 4, completed: 4, failed: 0 });
}, 120_000);
