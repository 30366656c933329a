import { afterAll, beforeAll, expect, test } from "bun:test";
import { SQL, type Subprocess } from "bun";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import OpenAI, { toFile } from "openai";
import { ensureOnnxModel } from "../../models/onnx/cache";
import { tempDir } from "../helpers/app";
import { cli, serveCli } from "../helpers/cli";
import { freshDatabase } from "../helpers/postgres";

// Issue 45, batches across nodes that serve different models: two real nodes on one PostgreSQL,
// node A serving "embed" and node B "embed-b" (the same generated ONNX files under another id). A
// batch of embed-b lines created through A is accepted (a live node serves its model), and its
// lines are run by B only: A leaves them (it would fail them with model_not_found), so every line
// completes, each charged once.

const dirs: string[] = [];
const children: Subprocess[] = [];
let url = "";
let sql: SQL;
let key = "";
let nodes: string[] = [];

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
  const adminEnv = { APPLIANCE_CONFIG: configFor(admin, "embed", model), APPLIANCE_STORE_URL: url };
  for (const args of [["store", "migrate"], ["accounts", "create", "team", "--credit", "5"]]) expect(cli(admin, args, adminEnv).code).toBe(0);
  key = cli(admin, ["keys", "create", "--account", "team", "--premium", "--json"], adminEnv).json<{ key: string }>().key;
  nodes = await Promise.all(
    (["embed", "embed-b"] as const).map(async (id, i) => {
      const dir = tempDir(`appliance-cluster-${i}-`);
      dirs.push(dir);
      const s = await serveCli(dir, ["--port", "0"], { APPLIANCE_CONFIG: configFor(dir, id, model), APPLIANCE_STORE_URL: url });
      children.push(s.child);
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
