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
});
