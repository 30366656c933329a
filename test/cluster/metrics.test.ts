import { afterAll, beforeAll, expect, test } from "bun:test";
import { SQL } from "bun";
import { ensureOnnxModel } from "../../models/onnx/cache";
import { clusterCli, embedModelToml, nodeConfig, startNode, stopNodes, type TestNode } from "../helpers/nodes";
import { freshDatabase } from "../helpers/postgres";
import { parseExposition, type Exposition } from "../helpers/prometheus";

// Issue 45, /metrics on a cluster: two real nodes on one PostgreSQL (A serving "embed", B
// "embed-b"), each sent its own billed requests. Each node's /metrics labels what it alone
// measures (HTTP requests, models, the process) with node="<its id>", and the cluster's totals
// read from the shared store (credits, batches, rentals, images) carry no node label and are the
// same on both nodes — the credits exactly the usage table's sum.

/** Families read from the shared store: the cluster's totals. */
const CLUSTER = new Set([
  "appliance_batch_lines",
  "appliance_batches",
  "appliance_rentals_active",
  "appliance_rental_gpu_minutes_total",
  "appliance_rental_credits_consumed_usd_total",
  "appliance_credits_consumed_usd_total",
  "appliance_images_generated_total",
]);

let storeUrl = "";
let sql: SQL;
let a: TestNode;
let b: TestNode;
let adminKey = "";
let userKey = "";

beforeAll(async () => {
  storeUrl = await freshDatabase("cluster_metrics");
  sql = new SQL({ url: storeUrl, max: 1 });
  const files = await ensureOnnxModel("embed");
  const admin = (args: string[]) => clusterCli(nodeConfig(embedModelToml("embed", files)), storeUrl, args);
  admin(["store", "migrate"]);
  admin(["accounts", "create", "ops", "--admin"]);
  admin(["accounts", "create", "team", "--credit", "5"]);
  adminKey = admin(["keys", "create", "--account", "ops", "--json"]).json<{ key: string }>().key;
  userKey = admin(["keys", "create", "--account", "team", "--premium", "--json"]).json<{ key: string }>().key;
  [a, b] = await Promise.all([startNode(nodeConfig(embedModelToml("embed", files)), storeUrl), startNode(nodeConfig(embedModelToml("embed-b", files)), storeUrl)]);
}, 180_000);
afterAll(async () => {
  await sql?.close();
  await stopNodes();
});

async function scrape(node: TestNode): Promise<Exposition> {
  const res = await fetch(`${node.url}/metrics`, { headers: { authorization: `Bearer ${adminKey}` } });
  expect(res.status).toBe(200);
  return parseExposition(await res.text());
}

async function embed(node: TestNode, model: string, n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    const res = await fetch(`${node.url}/v1/embeddings`, {
      method: "POST",
      headers: { authorization: `Bearer ${userKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model, input: `line ${i} of ${model}` }),
    });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
  }
}

const familyOf = (e: Exposition, name: string) => [...e.types.keys()].find((f) => name === f || (e.types.get(f) === "histogram" && name.startsWith(`${f}_`)))!;

test("each node labels its own series with its id; the store's totals carry no node label and agree, exactly", async () => {
  await embed(a, "embed", 3);
  await embed(b, "embed-b", 2);
  const [ea, eb] = await Promise.all([scrape(a), scrape(b)]);

  for (const [e, node] of [
    [ea, a],
    [eb, b],
  ] as const) {
    for (const s of e.samples) {
      const family = familyOf(e, s.name);
      if (CLUSTER.has(family)) expect(s.labels.node, `${s.name} is a cluster total`).toBeUndefined();
      else expect(s.labels.node, `${s.name}${JSON.stringify(s.labels)} is ${node.id}'s own`).toBe(node.id);
    }
    // Every cluster family is there (the set above is not stale).
    for (const f of CLUSTER) expect(e.types.has(f), f).toBe(true);
  }
  // This node's own: its model, its requests.
  expect(ea.value("appliance_model_loaded", { model: "embed", kind: "embedding", node: a.id })).toBe(1);
  expect(eb.value("appliance_model_loaded", { model: "embed-b", kind: "embedding", node: b.id })).toBe(1);
  const embeddings = (e: Exposition, node: string) => e.samples.filter((s) => s.name === "appliance_http_requests_total" && s.labels.route === "/v1/embeddings" && s.labels.node === node).reduce((n, s) => n + s.value, 0);
  expect(embeddings(ea, a.id)).toBe(3);
  expect(embeddings(eb, b.id)).toBe(2);

  // The cluster's totals: the same on both nodes, and the credits the usage table's sum.
  const totals = (e: Exposition) => e.samples.filter((s) => CLUSTER.has(familyOf(e, s.name))).map((s) => `${s.name}${JSON.stringify(s.labels)} ${s.value}`).sort();
  expect(totals(ea)).toEqual(totals(eb));
  const [{ cost }] = await sql`SELECT COALESCE(SUM(u.cost_micros), 0) AS cost FROM usage u JOIN api_keys k ON k.id = u.key_id WHERE k.kind = 'premium'`;
  expect(Number(cost)).toBeGreaterThan(0);
  expect(ea.value("appliance_credits_consumed_usd_total", { kind: "premium" })).toBe(Number(cost) / 1e6);
  expect(eb.value("appliance_credits_consumed_usd_total", { kind: "premium" })).toBe(Number(cost) / 1e6);
}, 60_000);
