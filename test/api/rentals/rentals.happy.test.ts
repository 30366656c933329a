import { afterAll, beforeAll, expect, test } from "bun:test";
import { join } from "node:path";
import { testApp, type TestApp } from "../../helpers/app";

// The real process launcher spawning a stand-in JupyterLab (test/fixtures/rentals/fake-jupyter.ts):
// spawn → ready → running → the connection works with its token → DELETE → stopped.

const FAKE = join(import.meta.dir, "../../fixtures/rentals/fake-jupyter.ts");
const GPU = "GPU-5f1c2b1e-9d4a-4c3e-8f2a-0a1b2c3d4e5f";
let t: TestApp;
let key: string;

beforeAll(() => {
  t = testApp({
    config: {
      rental_nodes: [{ gpu_uuid: GPU, gpu: "NVIDIA GeForce RTX 4090", vram_mb: 24564, compute_cap: 8.9, country: "Germany", country_code: "DE", price_per_hour: 0.6, launcher: "process" }],
      rentals: { process: { command: [process.execPath, FAKE], bind: "127.0.0.1" }, public_host: "127.0.0.1", ready_timeout_s: 20 },
    },
  });
  t.deps.rentals.start();
  key = t.key({ account: "renter", creditUsd: 5, scopes: ["inference", "rental"] });
});
afterAll(async () => {
  await t.deps.rentals.stop();
  t.close();
});

async function until<T>(fn: () => Promise<T>, ok: (v: T) => boolean, ms = 20_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (ok(v) || Date.now() > end) return v;
    await Bun.sleep(100);
  }
}

test("a jupyter rental starts, answers with its token, stops, and a second DELETE is safe", async () => {
  const gpus = await (await t.request("GET", "/api/v1/gpus", { key })).json();
  expect(gpus.data).toHaveLength(1);
  const node = gpus.data[0];
  expect(node).toMatchObject({ gpu_model: "NVIDIA GeForce RTX 4090", vram_mb: 24564, compute_cap: 8.9, country_code: "DE", price_per_hour: 0.6 });

  const created = await t.request("POST", "/api/v1/rentals", { key, body: { node_id: node.node_id, type: "jupyter" } });
  expect(created.status).toBe(200);
  const rental = await created.json();
  expect(rental).toMatchObject({ status: "pending", node_id: node.node_id, connection: null, price_per_hour: 0.6 });
  expect(rental.rental_id).toStartWith("rent_");
  expect((await (await t.request("GET", "/api/v1/gpus", { key })).json()).data).toHaveLength(0); // taken

  const running = await until(() => t.request("GET", `/api/v1/rentals/${rental.rental_id}`, { key }).then((r) => r.json()), (r: any) => r.status !== "pending");
  expect(running.status).toBe("running");
  expect(running.billed_minutes).toBe(1);
  expect(running.cost).toBe(0.01);
  const lab = await fetch(running.connection.url);
  expect(lab.status).toBe(200);
  expect(await lab.json()).toMatchObject({ lab: true, gpus: GPU });
  const wrong = await fetch(running.connection.url.replace(/token=[^&]+/, "token=nope"));
  expect(wrong.status).toBe(403);

  const stopped = await (await t.request("DELETE", `/api/v1/rentals/${rental.rental_id}`, { key })).json();
  expect(stopped).toMatchObject({ status: "stopped", stop_reason: "user", billed_minutes: 1, cost: 0.01, connection: null });
  await expect(fetch(running.connection.url)).rejects.toThrow(); // the process is gone
  const again = await t.request("DELETE", `/api/v1/rentals/${rental.rental_id}`, { key });
  expect(again.status).toBe(200);
  expect(await again.json()).toMatchObject({ status: "stopped" });
  expect((await (await t.request("GET", "/api/v1/gpus", { key })).json()).data).toHaveLength(1); // free again
  const list = await (await t.request("GET", "/api/v1/rentals", { key })).json();
  expect(list.data.map((r: any) => r.rental_id)).toEqual([rental.rental_id]);
}, 60_000);
