import { afterAll, describe, expect, test } from "bun:test";
import { createNode, settingsDiff, sharedSettings } from "../../src/2-services/cluster/node";
import { validateConfig } from "../../src/lib/config";
import { memoryLogger } from "../../src/lib/log";
import { connectPostgres, migratePostgres, type PgPools } from "../../src/4-store/pg/db";
import { postgresNodeStore } from "../../src/4-store/pg/nodes";
import { freshDatabase } from "../helpers/postgres";

// Issue 45, nodes: a cluster's nodes share [prices] and [limits] (the first differing field is
// named); a node registers and beats on a real PostgreSQL; one whose beats stop reaching the store
// fences itself after its lease, and one an operator drains takes no new work.

const pools: PgPools[] = [];
afterAll(async () => {
  for (const p of pools) await p.close().catch(() => {});
});

describe("shared settings", () => {
  const a = sharedSettings(validateConfig({}));
  test("equal configs: no difference", () => expect(settingsDiff(a, sharedSettings(validateConfig({})))).toBeNull());
  test("the first differing field is named, with both values", () => {
    const b = sharedSettings(validateConfig({ prices: { chat_input_per_m: 9 }, limits: { free_rpm: 5 } }));
    expect(settingsDiff(b, a)).toBe(`limits.free_rpm: 5 here, ${JSON.stringify((a.limits as { free_rpm: number }).free_rpm)} on the cluster`);
  });
});

describe("a node on PostgreSQL", () => {
  const open = async () => {
    const p = connectPostgres(await freshDatabase("nodes"));
    pools.push(p);
    await migratePostgres(p.money);
    return p;
  };
  const nodeOn = (p: PgPools, id: string, config = validateConfig({}), o: { leaseMs?: number; beatMs?: number } = {}) =>
    createNode({
      store: postgresNodeStore(p.fast),
      id,
      secret: "",
      url: () => `http://127.0.0.1:1/${id}`,
      config,
      models: () => [{ id: "m", name: "m", created: 0, kind: "chat", max_context: 4096, vision: false, loaded: false, in_flight: 0, slots: null }],
      gpus: async () => [],
      logger: memoryLogger(),
      ...o,
    });

  test("registers and beats; another node with other prices is refused before it starts; a drained node stops accepting at its next beat", async () => {
    const p = await open();
    const a = nodeOn(p, "node_a");
    await a.check();
    await a.start();
    const rows = await postgresNodeStore(p.fast).list();
    expect(rows.map((r) => [r.id, r.models.map((m) => m.id)])).toEqual([["node_a", ["m"]]]);
    const b = nodeOn(p, "node_b", validateConfig({ prices: { embedding_input_per_m: 1 } }));
    await expect(b.check()).rejects.toThrow(/prices\.embedding_input_per_m: 1 here/);
    expect(a.status()).toEqual({ accepting: true, reason: null });
    await postgresNodeStore(p.fast).setDraining("node_a", true);
    await a.beat();
    expect(a.status()).toEqual({ accepting: false, reason: "draining" });
    a.stop();
  });

  test("a node whose beats stop reaching the store fences itself once its lease has passed", async () => {
    const p = await open();
    const n = nodeOn(p, "node_c", validateConfig({}), { leaseMs: 300, beatMs: 50 });
    await n.start();
    expect(n.status().accepting).toBe(true);
    await p.close(); // the store is out of reach
    await Bun.sleep(450);
    expect(n.status()).toEqual({ accepting: false, reason: "fenced" });
    n.stop();
  });

  test("forwards go to a node with the model loaded first, then the least busy; hops still open count, so requests between two beats spread out", async () => {
    const p = await open();
    const model = (loaded: boolean, in_flight = 0) => [{ id: "m", name: "m", created: 0, kind: "chat", max_context: 4096, vision: false, loaded, in_flight, slots: 2 }];
    const mk = (id: string, models: ReturnType<typeof model>) => createNode({ store: postgresNodeStore(p.fast), id, secret: "", url: () => `http://127.0.0.1:1/${id}`, config: validateConfig({}), models: () => models, gpus: async () => [], logger: memoryLogger() });
    const nodes = [mk("node_1", model(false)), mk("node_2", model(true, 1)), mk("node_3", model(true, 0)), mk("node_4", [])];
    for (const n of nodes) await n.start();
    const me = nodes[3]!;
    await me.beat();
    expect(me.peersFor("m").map((x) => x.id)).toEqual(["node_3", "node_2", "node_1"]);
    const closes = [me.sent("node_3"), me.sent("node_3")]; // two open hops to node 3: busier than node 2's one in flight
    expect(me.peersFor("m").map((x) => x.id)).toEqual(["node_2", "node_3", "node_1"]);
    closes.forEach((c) => c());
    closes[0]!(); // closing twice changes nothing
    expect(me.peersFor("m").map((x) => x.id)).toEqual(["node_3", "node_2", "node_1"]);
    expect(me.peersFor("other")).toEqual([]);
    for (const n of nodes) n.stop();
  });
});
