import { afterAll, beforeAll, expect, test } from "bun:test";
import { ensureOnnxModel } from "../../models/onnx/cache";
import { clusterCli, embedModelToml, nodeCli, nodeConfig, nodeDir, nodeEnv, startNode, stopNodes, type TestNode } from "../helpers/nodes";
import { freshDatabase } from "../helpers/postgres";

// Issue 45, `appliance ps` on a cluster: two real nodes on one PostgreSQL, A serving "embed" and B
// "embed-b". ps on A's data dir lists both nodes' models, one row per (node, model): A's live from
// its control socket, B's as of its last heartbeat — and a model B loads shows as loaded at A once
// B has beaten. On a data dir with no server, every node's rows come from the store.

let storeUrl = "";
let a: TestNode;
let b: TestNode;
let files = "";

beforeAll(async () => {
  storeUrl = await freshDatabase("cluster_ps");
  files = await ensureOnnxModel("embed");
  clusterCli(nodeConfig(embedModelToml("embed", files)), storeUrl, ["store", "migrate"]);
  [a, b] = await Promise.all([startNode(nodeConfig(embedModelToml("embed", files)), storeUrl), startNode(nodeConfig(embedModelToml("embed-b", files)), storeUrl)]);
}, 180_000);
afterAll(() => stopNodes());

test("ps --json at A: A's model live, B's from its beat, each row naming its node", async () => {
  const r = await nodeCli(a, ["ps", "--json"]);
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  const rows = r.json<any[]>();
  expect(rows.map((x) => [x.node, x.id, x.as_of])).toEqual([
    [a.id, "embed", "live"],
    [b.id, "embed-b", "heartbeat"],
  ]);
  // A's row is ps's own (residency: pinned, keep-alive, memory…); B's carries what its beat says.
  expect(rows[0]).toMatchObject({ kind: "embedding", state: "unloaded", pinned: false, in_flight: 0, memory_mb: null });
  expect(rows[1]).toMatchObject({ kind: "embedding", state: "unloaded", in_flight: 0, max_context: 512 });
  expect(rows[1].heartbeat_age_s).toBeLessThan(15);
}, 30_000);

test("a model B loads shows as loaded at A after B's next beat; the table has a NODE column", async () => {
  const loaded = await nodeCli(b, ["ps", "load", "embed-b", "--json"]);
  expect(loaded.code).toBe(0);
  expect(loaded.json()).toMatchObject({ id: "embed-b", state: "loaded" });
  let rows: any[] = [];
  for (const until = Date.now() + 10_000; Date.now() < until; await Bun.sleep(300)) {
    rows = (await nodeCli(a, ["ps", "--json"])).json<any[]>();
    if (rows.find((x) => x.node === b.id)?.state === "loaded") break;
  }
  expect(rows.find((x) => x.node === b.id)).toMatchObject({ id: "embed-b", state: "loaded", as_of: "heartbeat" });
  expect(rows.find((x) => x.node === a.id)).toMatchObject({ id: "embed", state: "unloaded", as_of: "live" });

  const table = await nodeCli(a, ["ps"]);
  expect(table.code).toBe(0);
  const [header, ...lines] = table.stdout.trimEnd().split("\n");
  expect(header).toMatch(/^NODE\s+MODEL\s+KIND\s+STATE\s/);
  expect(lines.find((l) => l.startsWith(`${a.id} `))).toMatch(/^node_\w+\s+embed\s+embedding\s+unloaded\s/);
  expect(lines.find((l) => l.startsWith(`${b.id} `))).toMatch(/^node_\w+\s+embed-b\s+embedding\s+loaded\s/);
  expect(table.stdout).toContain("as of their last heartbeat");
}, 30_000);

test("on a data dir with no server, ps lists every node's models from the store", async () => {
  const { dir, config } = nodeDir(nodeConfig(embedModelToml("embed", files)), "appliance-ps-none-");
  const r = await nodeCli({ dir, env: nodeEnv(config, storeUrl) }, ["ps", "--json"]);
  expect(r.code).toBe(0);
  const rows = r.json<any[]>();
  expect(rows.map((x) => [x.node, x.id, x.as_of]).sort()).toEqual(
    [
      [a.id, "embed", "heartbeat"],
      [b.id, "embed-b", "heartbeat"],
    ].sort(),
  );
}, 30_000);
