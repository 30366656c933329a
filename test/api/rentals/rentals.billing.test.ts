import { afterEach, expect, test } from "bun:test";
import { ManualClock } from "../../../src/lib/clock";
import { testApp, type TestApp } from "../../helpers/app";
import { getRental, nodeIds, processesOf, rentalConfig, until } from "./setup";

// Billing and auto-stop with an injected clock: the notebook server is the real stand-in process;
// only time is moved by hand, and the service's tick (billing, expiry, probes) is called directly.

const apps: TestApp[] = [];
afterEach(async () => {
  for (const t of apps.splice(0)) {
    await t.deps.rentals.stop();
    await t.close();
  }
});

async function rentOne(o: { price: number; creditUsd: number; hours?: number }) {
  const clock = new ManualClock(Date.UTC(2026, 10, 1, 9, 0, 0));
  const t = testApp({ config: rentalConfig({ price: o.price }), clock });
  apps.push(t);
  const key = await t.key({ creditUsd: o.creditUsd, scopes: ["inference", "rental"] });
  const [node] = await nodeIds(t, key);
  const res = await t.request("POST", "/api/v1/rentals", { key, body: { node_id: node, type: "jupyter", ...(o.hours === undefined ? {} : { hours: o.hours }) } });
  expect(res.status).toBe(200);
  const { rental_id } = await res.json();
  const tick = () => t.deps.rentals.tick();
  const get = () => getRental(t, key, rental_id);
  const running = await until(async () => (await tick(), get()), (r) => r.status === "running");
  expect(running.status).toBe("running");
  const balance = () => (t.deps.db!.query("SELECT balance_micros AS b FROM accounts WHERE id = (SELECT account_id FROM rentals WHERE id = ?)").get(rental_id) as { b: number }).b;
  const charges = () => t.deps.db!.query("SELECT request_id, cost_micros, endpoint, model FROM usage WHERE request_id LIKE ? ORDER BY created_at, request_id").all(`${rental_id}:%`) as any[];
  const advance = async (ms: number) => {
    clock.advance(ms);
    await tick();
    return get();
  };
  return { t, key, clock, rental_id, running, tick, get, advance, balance, charges };
}

test("each started minute is charged as it starts, at the price fixed at creation, exactly", async () => {
  // 1.00 per hour: a minute is 16,666.67 µ$; totals are rounded up once, never per minute.
  const r = await rentOne({ price: 1, creditUsd: 1 });
  expect(r.running).toMatchObject({ billed_minutes: 1, cost: 0.016667 });
  expect(await r.advance(59_999)).toMatchObject({ billed_minutes: 1 });
  expect(await r.advance(1)).toMatchObject({ billed_minutes: 2, cost: 0.033334 }); // minute 2 starts at 60.000 s
  expect(await r.advance(8 * 60_000)).toMatchObject({ billed_minutes: 10, cost: 0.166667 });
  expect(r.balance()).toBe(1_000_000 - 166_667);
  const charges = r.charges();
  expect(charges.map((c) => c.request_id)).toEqual([`${r.rental_id}:m1`, `${r.rental_id}:m2`, `${r.rental_id}:m10`]);
  expect(charges.reduce((s, c) => s + c.cost_micros, 0)).toBe(166_667);
  expect(charges[0]).toMatchObject({ endpoint: "/api/v1/rentals", model: `gpu:${r.running.node_id}` });
  expect(await r.advance(0)).toMatchObject({ billed_minutes: 10 }); // a tick in the same minute charges nothing more

  // Stopped 30 s into minute 10: that minute was already paid; nothing more, nothing refunded.
  r.clock.advance(30_000);
  const stopped = await (await r.t.request("DELETE", `/api/v1/rentals/${r.rental_id}`, { key: r.key })).json();
  expect(stopped).toMatchObject({ status: "stopped", stop_reason: "user", billed_minutes: 10, cost: 0.166667 });
  expect(stopped.stopped_at - stopped.running_at).toBe(9 * 60 + 30);
  expect(r.balance()).toBe(1_000_000 - 166_667);
  expect(await r.advance(3_600_000)).toMatchObject({ billed_minutes: 10 }); // a stopped rental bills nothing
}, 30_000);

test("a rental with hours stops itself at expires_at (auto_stop), billed to that instant, its process gone", async () => {
  const r = await rentOne({ price: 0.6, creditUsd: 1, hours: 0.05 }); // 3 minutes
  expect(r.running.expires_at - r.running.running_at).toBe(180);
  expect(await r.advance(179_999)).toMatchObject({ status: "running", billed_minutes: 3 });
  await r.advance(1);
  const stopped = await until(r.get, (x) => x.status === "stopped");
  expect(stopped).toMatchObject({ status: "stopped", stop_reason: "auto_stop", billed_minutes: 3, cost: 0.03 });
  expect(stopped.stopped_at).toBe(stopped.expires_at);
  expect(processesOf(r.rental_id)).toEqual([]);
  expect(r.balance()).toBe(1_000_000 - 30_000);
});

test("ticks missed past expires_at (a stalled or stopped server) bill only until expires_at", async () => {
  const r = await rentOne({ price: 0.6, creditUsd: 1, hours: 0.05 });
  await r.advance(10 * 60_000);
  const stopped = await until(r.get, (x) => x.status === "stopped");
  expect(stopped).toMatchObject({ stop_reason: "auto_stop", billed_minutes: 3, cost: 0.03 });
  expect(stopped.stopped_at).toBe(stopped.expires_at);
});

test("a rental whose account runs dry stops with insufficient_credit after the last minute it could pay", async () => {
  const r = await rentOne({ price: 0.6, creditUsd: 0.025 }); // 0.01 per minute: 2.5 minutes of credit
  expect(r.running).toMatchObject({ billed_minutes: 1, cost: 0.01 });
  expect(await r.advance(60_000)).toMatchObject({ status: "running", billed_minutes: 2 });
  await r.advance(60_000); // minute 3 cannot be paid
  const stopped = await until(r.get, (x) => x.status === "stopped");
  expect(stopped).toMatchObject({ status: "stopped", stop_reason: "insufficient_credit", billed_minutes: 2, cost: 0.02 });
  expect(r.balance()).toBe(5_000);
  expect(processesOf(r.rental_id)).toEqual([]);
});

test("an Idempotency-Key is remembered for 24 h, then the same key rents anew", async () => {
  const r = await rentOne({ price: 0.6, creditUsd: 5 });
  await r.t.request("DELETE", `/api/v1/rentals/${r.rental_id}`, { key: r.key });
  const body = { node_id: r.running.node_id, type: "jupyter" };
  const headers = { "idempotency-key": "nightly-job" };
  const first = await (await r.t.request("POST", "/api/v1/rentals", { key: r.key, body, headers })).json();
  await r.t.request("DELETE", `/api/v1/rentals/${first.rental_id}`, { key: r.key });
  r.clock.advance(23 * 3_600_000);
  expect((await (await r.t.request("POST", "/api/v1/rentals", { key: r.key, body, headers })).json()).rental_id).toBe(first.rental_id);
  r.clock.advance(3_600_000 + 1);
  const fresh = await (await r.t.request("POST", "/api/v1/rentals", { key: r.key, body, headers })).json();
  expect(fresh.rental_id).not.toBe(first.rental_id);
  expect(fresh.status).toBe("pending");
  await r.t.request("DELETE", `/api/v1/rentals/${fresh.rental_id}`, { key: r.key });
}, 30_000);
