import { afterAll, beforeAll, expect, test } from "bun:test";
import { SQL, type Subprocess } from "bun";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import OpenAI, { toFile } from "openai";
import { ensureOnnxModel } from "../../models/onnx/cache";
import { tempDir } from "../helpers/app";
import { cli, serveCli } from "../helpers/cli";
import { freshDatabase, nodeEnv } from "../helpers/postgres";

// Issue 44, end to end: two real appliance processes on one PostgreSQL store serve one set of files
// and batches. A file uploaded to one is read back whole from the other (its bytes are in the
// store, not on either box's disk); a batch created on one is validated, run and finalized by the
// workers claiming from the store, its output file read from either; each line is charged once; a
// file deleted through one is gone, bytes and all, for both.

const dirs: string[] = [];
const children: Subprocess[] = [];
let url = "";
let sql: SQL;
let configPath = "";
let servers: string[] = [];
let key = "";

afterAll(async () => {
  for (const c of children) c.kill("SIGKILL");
  await Promise.all(children.map((c) => c.exited));
  await sql?.close();
  dirs.forEach((d) => rmSync(d, { recursive: true, force: true }));
});

const env = () => ({ APPLIANCE_CONFIG: configPath, ...nodeEnv(url) });
function admin(args: string[]) {
  const dir = tempDir("appliance-batches-pg-cli-");
  dirs.push(dir);
  const r = cli(dir, args, env());
  if (r.code !== 0) throw new Error(`appliance ${args.join(" ")} failed: ${r.stderr}`);
  return r;
}

beforeAll(async () => {
  url = await freshDatabase("batches_e2e");
  sql = new SQL({ url, max: 2 });
  const base = tempDir("appliance-batches-pg-");
  dirs.push(base);
  configPath = join(base, "config.toml");
  const model = await ensureOnnxModel("embed");
  writeFileSync(configPath, ["[engines]", 'device = "cpu"', "threads = 1", "[[models]]", 'id = "embed"', 'name = "Tiny embed"', 'kind = "embedding"', "max_context = 512", 'load = "start"', `files = { model = ${JSON.stringify(model)} }`, ""].join("\n"));
  admin(["store", "migrate"]);
  admin(["accounts", "create", "team", "--credit", "5"]);
  key = admin(["keys", "create", "--account", "team", "--premium", "--json"]).json<{ key: string }>().key;
  servers = await Promise.all(
    [0, 1].map(async (i) => {
      const dir = tempDir(`appliance-batches-pg-${i}-`);
      dirs.push(dir);
      const s = await serveCli(dir, ["--port", "0"], env());
      children.push(s.child);
      // read on, so that a full pipe never stalls a server
      for (const stream of [s.child.stdout, s.child.stderr] as ReadableStream<Uint8Array>[])
        void (async () => {
          for await (const _ of stream);
        })().catch(() => {});
      return s.url;
    }),
  );
}, 180_000);

const client = (server: string) => new OpenAI({ apiKey: key, baseURL: `${server}/v1`, maxRetries: 0 });

test("a file uploaded to one process is read whole from the other; a batch created on one is run, finalized and read from either", async () => {
  const [a, b] = [client(servers[0]!), client(servers[1]!)];
  const lines = Array.from({ length: 24 }, (_, i) => ({ custom_id: `e${i}`, method: "POST", url: "/v1/embeddings", body: { model: "embed", input: `line ${i} of the batch` } }));
  const jsonl = lines.map((l) => JSON.stringify(l)).join("\n") + "\n";
  const file = await a.files.create({ file: await toFile(Buffer.from(jsonl), "in.jsonl"), purpose: "batch" });
  expect(await (await b.files.content(file.id)).text()).toBe(jsonl);
  expect((await b.files.list()).data.map((f) => f.id)).toContain(file.id);

  const created = await b.batches.create({ input_file_id: file.id, endpoint: "/v1/embeddings", completion_window: "24h" });
  let done = await a.batches.retrieve(created.id);
  for (const end = Date.now() + 60_000; !["completed", "failed", "expired", "cancelled"].includes(done.status); done = await a.batches.retrieve(created.id)) {
    if (Date.now() > end) throw new Error(`the batch did not end: ${JSON.stringify(done)}`);
    await Bun.sleep(100);
  }
  expect(done.status).toBe("completed");
  expect(done.request_counts).toEqual({ total: 24, completed: 24, failed: 0 });
  expect(done.error_file_id).toBeNull();
  for (const c of [a, b]) {
    const out = (await (await c.files.content(done.output_file_id!)).text()).trim().split("\n").map((l) => JSON.parse(l));
    expect(out.map((o) => o.custom_id)).toEqual(lines.map((l) => l.custom_id));
    expect(out.every((o) => o.response.status_code === 200 && o.response.body.data[0].embedding.every(Number.isFinite))).toBe(true);
  }
  const [usage] = await sql`SELECT COUNT(*) AS n, COUNT(DISTINCT request_id) AS ids FROM usage WHERE request_id LIKE ${`req_${created.id.slice(6)}_%`}`;
  expect([Number(usage.n), Number(usage.ids)]).toEqual([24, 24]);
  const [lease] = await sql`SELECT COUNT(*) AS n FROM batch_lines WHERE batch_id = ${created.id} AND state = 'pending'`;
  expect(Number(lease.n)).toBe(0);
  // Deleting through one process deletes the bytes for both.
  await b.files.delete(done.output_file_id!);
  expect((await a.files.content(done.output_file_id!).catch((e) => e)).status).toBe(404);
  const [chunks] = await sql`SELECT COUNT(*) AS n FROM file_chunks WHERE file_id = ${done.output_file_id!}`;
  expect(Number(chunks.n)).toBe(0);
}, 90_000);
