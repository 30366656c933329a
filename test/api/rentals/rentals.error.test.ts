import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { testApp, type TestApp } from "../../helpers/app";
import { nodeIdFor } from "../../../src/2-services/rentals/inventory";
import { GPU_UUIDS, ended, getRental, nodeIds, processesOf, rentalConfig, until } from "./setup";

// Every refusal of the rentals API with its documented status and code, and launches that go
// wrong: the process dies, never answers, or cannot start. Each ends `failed`, bills nothing
// more, and frees its GPU.

const RENTAL = ["inference", "rental"] as const;

async function expectError(res: Response, status: number, code: string | null, param?: string) {
  expect(res.status).toBe(status);
  const body = (await res.json()) as any;
  expect(body.error.code).toBe(code);
  expect(typeof body.error.message).toBe("string");
  if (param !== undefined) expect(body.error.param).toBe(param);
  return body.error.message as string;
}

describe("refusals", () => {
  let t: TestApp;
  beforeAll(async () => {
    t = testApp({ config: rentalConfig({ nodes: 3, maxHours: 48 }) });
    await t.deps.rentals.start();
  });
  afterAll(async () => {
    await t.deps.rentals.stop();
    await t.close();
  });
  const post = (key: string, body: unknown, headers?: Record<string, string>) => t.request("POST", "/api/v1/rentals", { key, body, headers });

  test("a malformed body is 400 naming the field", async () => {
    const key = await t.key({ creditUsd: 1, scopes: [...RENTAL] });
    const [node] = await nodeIds(t, key);
    await expectError(await post(key, "{"), 400, "invalid_json");
    await expectError(await post(key, [1, 2]), 400, null);
    await expectError(await post(key, { type: "jupyter" }), 400, null, "node_id");
    await expectError(await post(key, { node_id: 7, type: "jupyter" }), 400, null, "node_id");
    await expectError(await post(key, { node_id: node }), 400, null, "type");
    expect(await expectError(await post(key, { node_id: node, type: "ssh" }), 400, null, "type")).toContain('"ssh"');
    for (const hours of [0, -1, "2", 48.5, true])
      expect(await expectError(await post(key, { node_id: node, type: "jupyter", hours }), 400, null, "hours")).toContain("≤ 48");
    await expectError(await post(key, { node_id: node, type: "jupyter" }, { "idempotency-key": "k".repeat(256) }), 400, null, "Idempotency-Key");
    expect(t.deps.db!.query("SELECT count(*) AS n FROM rentals").get()).toEqual({ n: 0 }); // nothing was created or started
    expect(await nodeIds(t, key)).toHaveLength(3);
  });

  test("an unknown node is 404 node_not_found; another key's rental is 404 not_found", async () => {
    const key = await t.key({ creditUsd: 1, scopes: [...RENTAL] });
    await expectError(await post(key, { node_id: "00000000-0000-5000-8000-000000000000", type: "jupyter" }), 404, "node_not_found", "node_id");
    await expectError(await t.request("GET", "/api/v1/rentals/rent_nope", { key }), 404, "not_found");
    await expectError(await t.request("DELETE", "/api/v1/rentals/rent_nope", { key }), 404, "not_found");
    await expectError(await t.request("GET", "/api/v1/rentals/rent_nope/logs", { key }), 404, "not_found");
  });

  test("a taken node is 409 node_unavailable; max_active_rentals is 409 max_active_rentals_reached; stopping frees both", async () => {
    const a = await t.key({ creditUsd: 1, scopes: [...RENTAL], maxActiveRentals: 1 });
    const b = await t.key({ creditUsd: 1, scopes: [...RENTAL] });
    const [n1, n2] = await nodeIds(t, a);
    const first = await (await post(a, { node_id: n1, type: "jupyter" })).json();
    expect(first.status).toBe("pending");
    expect(await expectError(await post(b, { node_id: n1, type: "jupyter" }), 409, "node_unavailable", "node_id")).toContain(n1!);
    expect(await expectError(await post(a, { node_id: n2, type: "jupyter" }), 409, "max_active_rentals_reached")).toContain("max_active_rentals");
    const none = await t.key({ creditUsd: 1, scopes: [...RENTAL], maxActiveRentals: 0 });
    await expectError(await post(none, { node_id: n2, type: "jupyter" }), 409, "max_active_rentals_reached");

    await t.request("DELETE", `/api/v1/rentals/${first.rental_id}`, { key: a });
    const second = await post(a, { node_id: n2, type: "jupyter" });
    expect(second.status).toBe(200);
    expect((await post(b, { node_id: n1, type: "jupyter" })).status).toBe(200);
    await t.request("DELETE", `/api/v1/rentals/${(await second.json()).rental_id}`, { key: a });
    for (const r of (await (await t.request("GET", "/api/v1/rentals", { key: b })).json()).data) await t.request("DELETE", `/api/v1/rentals/${r.rental_id}`, { key: b });
  }, 30_000);

  test("a balance below one minute is 402 insufficient_balance", async () => {
    const poor = await t.key({ creditUsd: 0.009, scopes: [...RENTAL] }); // one minute at 0.6/h is 0.01
    const [node] = await nodeIds(t, poor);
    expect(await expectError(await post(poor, { node_id: node, type: "jupyter" }), 402, "insufficient_balance")).toContain("0.01");
    expect(await nodeIds(t, poor)).toContain(node!);
  });

  test("a free key with the rental scope is refused with 403 naming the premium key, also when its account has a balance; nothing starts", async () => {
    // Rentals are paid from the prepaid balance, which nothing else lets a free key spend.
    const free = await t.key({ kind: "free", creditUsd: 5, scopes: [...RENTAL] });
    const [node] = await nodeIds(t, free); // the GPUs may still be listed
    const before = (t.deps.db!.query("SELECT count(*) AS n FROM rentals").get() as { n: number }).n;
    for (const headers of [undefined, { "idempotency-key": "free-1" }]) {
      const msg = await expectError(await post(free, { node_id: node, type: "jupyter" }, headers), 403, "premium_key_required");
      expect(msg).toContain("premium key");
      expect(msg).toContain("free key cannot spend");
    }
    expect((t.deps.db!.query("SELECT count(*) AS n FROM rentals").get() as { n: number }).n).toBe(before);
    expect(await nodeIds(t, free)).toContain(node!);
    expect((await t.deps.accounts.getAccount((await t.deps.accounts.authenticate(free))!.accountId)).balance_micros).toBe(5_000_000);
  });

  test("one Idempotency-Key with another body is 422 idempotency_key_reused", async () => {
    const key = await t.key({ creditUsd: 1, scopes: [...RENTAL], maxActiveRentals: 3 });
    const [n1, n2] = await nodeIds(t, key);
    const first = await (await post(key, { node_id: n1, type: "jupyter" }, { "idempotency-key": "once" })).json();
    expect(await expectError(await post(key, { node_id: n2, type: "jupyter" }, { "idempotency-key": "once" }), 422, "idempotency_key_reused", "Idempotency-Key")).toContain("different body");
    expect(await expectError(await post(key, { node_id: n1, type: "jupyter", hours: 2 }, { "idempotency-key": "once" }), 422, "idempotency_key_reused")).toBeTruthy();
    // Keys are per API key: another key using the same string rents on its own.
    const other = await t.key({ creditUsd: 1, scopes: [...RENTAL] });
    expect((await post(other, { node_id: n2, type: "jupyter" }, { "idempotency-key": "once" })).status).toBe(200);
    await t.request("DELETE", `/api/v1/rentals/${first.rental_id}`, { key });
    for (const r of (await (await t.request("GET", "/api/v1/rentals", { key: other })).json()).data) await t.request("DELETE", `/api/v1/rentals/${r.rental_id}`, { key: other });
  }, 30_000);
});

describe("launches that go wrong", () => {
  async function withApp(config: ReturnType<typeof rentalConfig>, run: (t: TestApp, key: string, nodeId: string) => Promise<void>) {
    const t = testApp({ config });
    await t.deps.rentals.start();
    try {
      const key = await t.key({ creditUsd: 1, scopes: [...RENTAL] });
      const [nodeId] = await nodeIds(t, key);
      await run(t, key, nodeId!);
    } finally {
      await t.deps.rentals.stop();
      await t.close();
    }
  }

  test("a notebook server that dies while running ends failed, billing stops, what it left running is stopped, the GPU is free", async () => {
    await withApp(rentalConfig({ args: ["--die-after-ms=1500", "--kernel"] }), async (t, key, nodeId) => {
      const { rental_id } = await (await t.request("POST", "/api/v1/rentals", { key, body: { node_id: nodeId, type: "jupyter" } })).json();
      const running = await until(() => getRental(t, key, rental_id), (r) => r.status !== "pending");
      expect(running.status).toBe("running");
      const failed = await until(() => getRental(t, key, rental_id), ended, 15_000);
      expect(failed).toMatchObject({ status: "failed", stop_reason: "error", connection: null, billed_minutes: 1, cost: 0.01 });
      expect(failed.failure).toContain("exited");
      expect(failed.stopped_at).not.toBeNull();
      expect(await until(async () => processesOf(rental_id), (p) => p.length === 0, 10_000)).toEqual([]); // its orphaned "kernel" too
      expect(await nodeIds(t, key)).toContain(nodeId);
      // DELETE on a failed rental answers it as it is.
      const del = await t.request("DELETE", `/api/v1/rentals/${rental_id}`, { key });
      expect(del.status).toBe(200);
      expect(await del.json()).toMatchObject({ status: "failed", stop_reason: "error" });
    });
  }, 30_000);

  test("a notebook server that never answers fails after ready_timeout_s, unbilled, and its process is stopped", async () => {
    await withApp(rentalConfig({ args: ["--delay-ms=60000"], readyTimeoutS: 1 }), async (t, key, nodeId) => {
      const { rental_id } = await (await t.request("POST", "/api/v1/rentals", { key, body: { node_id: nodeId, type: "jupyter" } })).json();
      const failed = await until(() => getRental(t, key, rental_id), ended, 15_000);
      expect(failed).toMatchObject({ status: "failed", stop_reason: "error", billed_minutes: 0, cost: 0, running_at: null });
      expect(failed.failure).toContain("did not answer within 1 s");
      await until(async () => processesOf(rental_id), (p) => p.length === 0, 10_000);
      expect(processesOf(rental_id)).toEqual([]);
      expect(await nodeIds(t, key)).toContain(nodeId);
    });
  }, 30_000);

  test("a node whose launch command is missing is offline: not listed, 409 naming why, a warning in the log", async () => {
    const t = testApp({ config: rentalConfig({ command: ["/nonexistent/jupyter-lab"] }) });
    await t.deps.rentals.start();
    try {
      const key = await t.key({ creditUsd: 1, scopes: [...RENTAL] });
      expect(await nodeIds(t, key)).toEqual([]);
      const nodeId = nodeIdFor(GPU_UUIDS[0]!);
      const msg = await expectError(await t.request("POST", "/api/v1/rentals", { key, body: { node_id: nodeId, type: "jupyter" } }), 409, "node_unavailable", "node_id");
      expect(msg).toContain("offline");
      expect(t.logs.find((l) => l.msg === "rental launcher offline")).toMatchObject({ launcher: "process" });
      expect(JSON.stringify(t.logs)).toContain("/nonexistent/jupyter-lab is not an executable file");
      expect(t.deps.rentals.launcherProblems().process).toContain("rentals.process.command");
    } finally {
      await t.deps.rentals.stop();
      await t.close();
    }
  });

  test("a command that exits at once fails the rental before it runs, unbilled", async () => {
    await withApp(rentalConfig({ command: ["/bin/false"] }), async (t, key, nodeId) => {
      const { rental_id } = await (await t.request("POST", "/api/v1/rentals", { key, body: { node_id: nodeId, type: "jupyter" } })).json();
      const failed = await until(() => getRental(t, key, rental_id), ended, 10_000);
      expect(failed).toMatchObject({ status: "failed", stop_reason: "error", billed_minutes: 0, running_at: null });
      expect(failed.failure).toContain("exited before it answered");
      expect(await nodeIds(t, key)).toContain(nodeId);
    });
  });
});
