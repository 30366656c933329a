import { afterAll, beforeAll, expect, test } from "bun:test";
import { ensureChatModel } from "../../models/cache";
import { clusterCli, nodeConfig, startNode, stopNodes, type TestNode } from "../helpers/nodes";
import { freshDatabase } from "../helpers/postgres";

// Issue 45: every hop from node A to node B comes from A's one address, so B's per-address cap
// (server.max_requests_per_address) would refuse a busy A's clients as one. A signed hop is not
// counted there (they were counted at A, client by client); an unsigned request still is.

let a: TestNode;
let b: TestNode;
let key = "";

beforeAll(async () => {
  const url = await freshDatabase("cluster_hop_cap");
  const chat = await ensureChatModel("chat");
  const chatB = ["[[models]]", 'id = "chat-b"', 'name = "chat-b"', 'kind = "chat"', `files = { model = ${JSON.stringify(chat)} }`, "max_context = 1024", "slots = 6", 'load = "start"', ""].join("\n");
  const capped = (models: string) => ["[server]", "max_requests_per_address = 2", nodeConfig(models)].join("\n");
  clusterCli(nodeConfig(""), url, ["store", "migrate"]);
  clusterCli(nodeConfig(""), url, ["accounts", "create", "cap", "--credit", "10"]);
  key = clusterCli(nodeConfig(""), url, ["keys", "create", "--account", "cap", "--premium", "--json"]).json<{ key: string }>().key;
  [a, b] = await Promise.all([startNode(nodeConfig(""), url), startNode(capped(chatB), url)]);
  for (const end = Date.now() + 15_000; ; await Bun.sleep(200)) {
    const r = await fetch(`${a.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
    if (((await r.json()) as { data: { id: string }[] }).data.some((m) => m.id === "chat-b")) break;
    if (Date.now() > end) throw new Error("node A never listed chat-b");
  }
}, 180_000);
afterAll(() => stopNodes());

const stream = (base: string) =>
  fetch(`${base}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "chat-b", messages: [{ role: "user", content: "go on" }], max_tokens: 400, stream: true }),
  });

test("six streams through node A to node B, whose cap is two per address: all served", async () => {
  const res = await Promise.all(Array.from({ length: 6 }, () => stream(a.url)));
  const bodies = await Promise.all(res.map((r) => r.text()));
  expect(res.map((r) => r.status)).toEqual(Array(6).fill(200));
  expect(bodies.every((t) => t.includes("data: [DONE]"))).toBe(true);
}, 60_000);

test("six unsigned streams straight to node B: its cap refuses those past two", async () => {
  const res = await Promise.all(Array.from({ length: 6 }, () => stream(b.url)));
  await Promise.all(res.map((r) => r.arrayBuffer()));
  expect(res.filter((r) => r.status === 429).length).toBeGreaterThan(0);
}, 60_000);
