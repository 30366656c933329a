import { afterAll, beforeAll, expect, test } from "bun:test";
import { nodeIdFor } from "../../../src/2-services/rentals/inventory";
import { testApp, type TestApp } from "../../helpers/app";
import { GPU_UUIDS, getRental, nodeIds, processesOf, rentalConfig, until } from "./setup";

// The real process launcher spawning a stand-in JupyterLab (test/fixtures/rentals/fake-jupyter.ts):
// spawn → ready → running → the connection works with its token → DELETE → stopped.

let t: TestApp;
let key: string;

beforeAll(async () => {
  t = testApp({ config: rentalConfig({ nodes: 2 }) });
  await t.deps.rentals.start();
  key = await t.key({ account: "renter", creditUsd: 5, scopes: ["inference", "rental"], maxActiveRentals: 2 });
});
afterAll(async () => {
  await t.deps.rentals.stop();
  await t.close();
});

test("a jupyter rental starts, answers with its token, keeps its log, stops, and a second DELETE is safe", async () => {
  const gpus = await (await t.request("GET", "/api/v1/gpus", { key })).json();
  expect(gpus.object).toBe("list");
  expect(gpus.data).toHaveLength(2);
  const node = gpus.data[0];
  expect(node).toMatchObject({ gpu_model: "NVIDIA GeForce RTX 4090", vram_mb: 24564, compute_cap: 8.9, country: "Germany", country_code: "DE", price_per_hour: 0.6 });

  const created = await t.request("POST", "/api/v1/rentals", { key, body: { node_id: node.node_id, type: "jupyter" } });
  expect(created.status).toBe(200);
  const rental = await created.json();
  expect(rental).toMatchObject({ object: "rental", status: "pending", node_id: node.node_id, connection: null, price_per_hour: 0.6, hours: null, expires_at: null, running_at: null });
  expect(rental.rental_id).toStartWith("rent_");
  expect(await nodeIds(t, key)).not.toContain(node.node_id); // taken

  const running = await until(() => getRental(t, key, rental.rental_id), (r) => r.status !== "pending");
  expect(running.status).toBe("running");
  expect(running.billed_minutes).toBe(1);
  expect(running.cost).toBe(0.01);
  expect(running.expires_at).toBeNull(); // no hours: runs until stopped
  expect(running.connection.token).toHaveLength(40);
  expect(running.connection.url).toContain(`token=${running.connection.token}`);
  const lab = await fetch(running.connection.url);
  expect(lab.status).toBe(200);
  const seen = await lab.json();
  // CUDA_VISIBLE_DEVICES names exactly the node's GPU (node ids derive from GPU UUIDs).
  expect(seen.gpus).toBe(GPU_UUIDS.find((u) => nodeIdFor(u) === node.node_id)!);
  expect(seen.cwd).toEndWith(`rentals/${rental.rental_id}`); // its own working dir
  const wrong = await fetch(running.connection.url.replace(/token=[^&]+/, "token=nope"));
  expect(wrong.status).toBe(403);
  expect(processesOf(rental.rental_id)).toHaveLength(1);

  const logs = await t.request("GET", `/api/v1/rentals/${rental.rental_id}/logs`, { key });
  expect(logs.status).toBe(200);
  expect(logs.headers.get("content-type")).toStartWith("text/plain");
  expect(await logs.text()).toContain("fake-jupyter listening on");

  const stopped = await (await t.request("DELETE", `/api/v1/rentals/${rental.rental_id}`, { key })).json();
  expect(stopped).toMatchObject({ status: "stopped", stop_reason: "user", billed_minutes: 1, cost: 0.01, connection: null });
  expect(stopped.stopped_at).toBeGreaterThanOrEqual(stopped.running_at);
  await expect(fetch(running.connection.url)).rejects.toThrow(); // the process is gone
  expect(processesOf(rental.rental_id)).toEqual([]);
  const again = await t.request("DELETE", `/api/v1/rentals/${rental.rental_id}`, { key });
  expect(again.status).toBe(200);
  expect(await again.json()).toMatchObject({ status: "stopped", stop_reason: "user" });
  expect(await nodeIds(t, key)).toContain(node.node_id); // free again
  expect(await (await t.request("GET", `/api/v1/rentals/${rental.rental_id}/logs`, { key })).text()).toContain("fake-jupyter listening on"); // kept after the stop
  const list = await (await t.request("GET", "/api/v1/rentals", { key })).json();
  expect(list).toMatchObject({ object: "list" });
  expect(list.data.map((r: any) => r.rental_id)).toEqual([rental.rental_id]);
}, 60_000);

test("50 concurrent POSTs with one Idempotency-Key create exactly one rental and one process", async () => {
  const [nodeId] = await nodeIds(t, key);
  const body = { node_id: nodeId, type: "jupyter", hours: 1 };
  const count = () => (t.deps.db!.query("SELECT count(*) AS n FROM rentals").get() as { n: number }).n;
  const before = count();
  const answers = await Promise.all(
    Array.from({ length: 50 }, () => t.request("POST", "/api/v1/rentals", { key, body, headers: { "idempotency-key": "retry-me-1" } })),
  );
  expect(answers.map((r) => r.status)).toEqual(Array(50).fill(200));
  const ids = new Set((await Promise.all(answers.map((r) => r.json()))).map((r: any) => r.rental_id));
  expect(ids.size).toBe(1);
  const [id] = [...ids] as string[];
  const running = await until(() => getRental(t, key, id!), (r) => r.status !== "pending");
  expect(running.status).toBe("running");
  expect(running.expires_at - running.running_at).toBe(3600); // hours counts from running_at
  expect(processesOf(id!)).toHaveLength(1);
  expect(count()).toBe(before + 1);

  // A later retry (same key, same body) still answers with that rental and starts nothing.
  const retry = await t.request("POST", "/api/v1/rentals", { key, body, headers: { "idempotency-key": "retry-me-1" } });
  expect((await retry.json()).rental_id).toBe(id);
  expect(processesOf(id!)).toHaveLength(1);

  await t.request("DELETE", `/api/v1/rentals/${id}`, { key });
  expect(processesOf(id!)).toEqual([]);
  // Even after the stop, the key replays the stopped rental rather than renting again.
  expect(await (await t.request("POST", "/api/v1/rentals", { key, body, headers: { "idempotency-key": "retry-me-1" } })).json()).toMatchObject({ rental_id: id, status: "stopped" });
}, 60_000);
