import { afterAll, beforeAll, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { rentalsRepo } from "../../../src/4-store/rentals";
import { testApp, type TestApp } from "../../helpers/app";
import { authSuite } from "../http/auth-suite";
import { getRental, nodeIds, processesOf, rentalConfig, until } from "./setup";

authSuite({
  name: "rentals",
  scope: "rental",
  format: "openai",
  routes: [
    { method: "GET", path: "/api/v1/gpus" },
    { method: "POST", path: "/api/v1/rentals", body: { node_id: "x", type: "jupyter" } },
    { method: "GET", path: "/api/v1/rentals" },
    { method: "GET", path: "/api/v1/rentals/rent_x" },
    { method: "GET", path: "/api/v1/rentals/rent_x/logs" },
    { method: "DELETE", path: "/api/v1/rentals/rent_x" },
  ],
  owned: async (t, ownerKey) => {
    const p = (await t.deps.accounts.authenticate(ownerKey))!;
    const repo = rentalsRepo(t.deps.db!);
    repo.insert({ id: "rent_owned", key_id: p.keyId, account_id: p.accountId, node_id: "n", type: "jupyter", price_per_hour_micros: 600_000, hours: null, token: "t".repeat(40), launcher: "process", created_at: Date.now() });
    repo.transition("rent_owned", ["pending"], "failed", { failure: "test", stop_reason: "error", stopped_at: Date.now() });
    return [
      { method: "GET", path: "/api/v1/rentals/rent_owned" },
      { method: "GET", path: "/api/v1/rentals/rent_owned/logs" },
      { method: "DELETE", path: "/api/v1/rentals/rent_owned" },
    ];
  },
});

let t: TestApp;
beforeAll(async () => {
  t = testApp({ config: rentalConfig() });
  await t.deps.rentals.start();
});
afterAll(async () => {
  await t.deps.rentals.stop();
  await t.close();
});

test("another key of the same account can neither see, read the log of, nor stop a running rental; its token is never logged nor on the command line", async () => {
  const owner = await t.key({ account: "lab", creditUsd: 1, scopes: ["inference", "rental"] });
  const sibling = await t.key({ account: "lab", scopes: ["inference", "rental"] });
  const [node] = await nodeIds(t, owner);
  const { rental_id } = await (await t.request("POST", "/api/v1/rentals", { key: owner, body: { node_id: node, type: "jupyter" } })).json();
  const running = await until(() => getRental(t, owner, rental_id), (r) => r.status !== "pending");
  expect(running.status).toBe("running");

  for (const [method, path] of [["GET", `/api/v1/rentals/${rental_id}`], ["GET", `/api/v1/rentals/${rental_id}/logs`], ["DELETE", `/api/v1/rentals/${rental_id}`]] as const)
    expect((await t.request(method, path, { key: sibling })).status).toBe(404);
  expect((await (await t.request("GET", "/api/v1/rentals", { key: sibling })).json()).data).toEqual([]);
  expect(processesOf(rental_id)).toHaveLength(1); // the sibling's DELETE stopped nothing
  expect((await getRental(t, owner, rental_id)).status).toBe("running");

  // The notebook server refuses requests without the token, and the token appears in no log line.
  const bare = running.connection.url.replace(/\?token=.*$/, "");
  expect((await fetch(bare)).status).toBe(403);
  expect(JSON.stringify(t.logs)).not.toContain(running.connection.token);
  // Nor is it on the notebook server's command line, which every local user can read (`ps`).
  const [pid] = processesOf(rental_id);
  expect(readFileSync(`/proc/${pid}/cmdline`, "utf8")).not.toContain(running.connection.token);

  await t.request("DELETE", `/api/v1/rentals/${rental_id}`, { key: owner });
  expect(processesOf(rental_id)).toEqual([]);
}, 30_000);

test("a key that loses the rental scope is refused with 403 naming the scope", async () => {
  const key = await t.key({ creditUsd: 1, scopes: ["inference", "rental"] });
  expect((await t.request("GET", "/api/v1/rentals", { key })).status).toBe(200);
  await t.deps.accounts.setScope(key, "rental", false);
  const res = await t.request("GET", "/api/v1/rentals", { key });
  expect(res.status).toBe(403);
  const body = await res.json();
  expect(body.error.code).toBe("missing_scope");
  expect(body.error.message).toContain("rental");
});
