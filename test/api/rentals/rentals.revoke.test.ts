import { afterEach, expect, test } from "bun:test";
import { ManualClock } from "../../../src/lib/clock";
import { rentalsRepo } from "../../../src/4-store/rentals";
import { testApp, type TestApp } from "../../helpers/app";
import { cli } from "../../helpers/cli";
import { ended, getRental, nodeIds, processesOf, rentalConfig, until } from "./setup";

// What becomes of a key's rentals when the key goes (issue 23: a revoked key's rentals kept running
// and billing). Revoking a key — console, CLI, or the service — stops them at the next tick, billed
// to the moment of revocation, with stop_reason `key_revoked`. Rotating a key is not revoking it:
// its rentals move to the new key and run on.

const apps: TestApp[] = [];
afterEach(async () => {
  for (const t of apps.splice(0)) await t.close();
});

async function rented(clock?: ManualClock) {
  const t = testApp({ config: rentalConfig(), clock });
  apps.push(t);
  await t.deps.rentals.start();
  const key = await t.key({ account: "lab", creditUsd: 5, scopes: ["inference", "rental"] });
  const [node] = await nodeIds(t, key);
  const { rental_id } = await (await t.request("POST", "/api/v1/rentals", { key, body: { node_id: node, type: "jupyter" } })).json();
  const running = await until(async () => (await t.deps.rentals.tick(), getRental(t, key, rental_id)), (r) => r.status !== "pending");
  expect(running.status).toBe("running");
  const row = () => rentalsRepo(t.deps.db!).byId(rental_id)!;
  return { t, key, keyId: (await t.deps.accounts.authenticate(key))!.keyId, node: node!, rental_id, running, row };
}

test("revoking a key stops its running rental at the next tick, billed to the moment it was revoked; its process goes and its GPU is free", async () => {
  const clock = new ManualClock(Date.UTC(2026, 10, 1, 9, 0, 0));
  const r = await rented(clock);
  clock.advance(90_000);
  await r.t.deps.rentals.tick();
  expect(r.row()).toMatchObject({ status: "running", billed_minutes: 2 });

  await r.t.deps.accounts.revokeKey(r.keyId); // what the console's and the CLI's revoke call
  expect((await r.t.request("GET", `/api/v1/rentals/${r.rental_id}`, { key: r.key })).status).toBe(401);
  clock.advance(5 * 60_000); // the next tick comes late (a stalled server): nothing after the revocation is billed
  await r.t.deps.rentals.tick();
  await until(async () => r.row(), ended, 10_000);
  expect(r.row()).toMatchObject({ status: "stopped", stop_reason: "key_revoked", billed_minutes: 2, cost_micros: 20_000, failure: null });
  expect(processesOf(r.rental_id)).toEqual([]);
  expect((await r.t.deps.accounts.getAccount("lab")).balance_micros).toBe(5_000_000 - 20_000);
  const other = await r.t.key({ creditUsd: 1, scopes: ["inference", "rental"] });
  expect(await nodeIds(r.t, other)).toEqual([r.node]);
  // The account still sees it, and why it stopped, in the console.
  const [shown] = ((await r.t.deps.console.views.rentals((await r.t.deps.accounts.getAccount("lab")).id)) as { data: any[] }).data;
  expect(shown).toMatchObject({ rental_id: r.rental_id, status: "stopped", stop_reason: "key_revoked" });
}, 30_000);

test("a key revoked by the CLI, another process on the same store, stops its rentals too", async () => {
  const r = await rented();
  const out = cli(r.t.dir, ["keys", "revoke", r.keyId, "--json"]);
  expect(out.code).toBe(0);
  await r.t.deps.rentals.tick();
  await until(async () => r.row(), ended, 10_000);
  expect(r.row()).toMatchObject({ status: "stopped", stop_reason: "key_revoked" });
  expect(processesOf(r.rental_id)).toEqual([]);
}, 30_000);

test("rotating a key moves its rentals to the new key: they run on and bill, the new key sees and stops them, the old key is refused", async () => {
  const r = await rented();
  const rotated = await r.t.deps.accounts.rotateKey(r.keyId);
  await r.t.deps.rentals.tick();
  expect(r.row()).toMatchObject({ status: "running", key_id: rotated.info.id });
  expect(processesOf(r.rental_id)).toHaveLength(1);
  expect((await r.t.request("GET", `/api/v1/rentals/${r.rental_id}`, { key: r.key })).status).toBe(401);
  expect(await getRental(r.t, rotated.key, r.rental_id)).toMatchObject({ status: "running", connection: r.running.connection });
  const stopped = await (await r.t.request("DELETE", `/api/v1/rentals/${r.rental_id}`, { key: rotated.key })).json();
  expect(stopped).toMatchObject({ status: "stopped", stop_reason: "user" });
  expect(processesOf(r.rental_id)).toEqual([]);
}, 30_000);
