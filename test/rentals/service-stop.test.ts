import { afterAll, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { createAccountService } from "../../src/2-services/accounts/service";
import { createLimits } from "../../src/2-services/billing/limits";
import { createMeter } from "../../src/2-services/billing/meter";
import { ManualClock } from "../../src/lib/clock";
import { validateConfig } from "../../src/lib/config";
import { memoryLogger } from "../../src/lib/log";
import type { LaunchHandle, LaunchIntent, Launcher, LaunchSpec } from "../../src/2-services/rentals/launchers/types";
import { createRentalsService } from "../../src/2-services/rentals/service";
import { sqliteAccountStore } from "../../src/4-store/accounts";
import { openStore } from "../../src/4-store/db";
import { sqliteRentalStore } from "../../src/4-store/rentals";
import { tempDir } from "../helpers/app";

// The state machine's stop over a launcher that cannot always stop (the Docker daemon does not
// answer): a rental holds its node until what it started is known to be gone, so the GPU is never
// listed free while a notebook server may still hold it. A stand-in launcher, an injected clock.

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

const NODE = { node_id: "7d4a0f9e-1a43-5c1e-9d2b-0c1d2e3f4a5b", gpu: "NVIDIA GeForce RTX 4090", gpu_uuids: ["GPU-1"], vram_mb: 24564, compute_cap: 8.9, country: "Germany", country_code: "DE", price_per_hour: 0.6, launcher: "stand-in" };

/** A launcher whose servers answer at once and whose stop and reclaim fail while `down` is set. */
function standIn() {
  const live = new Set<string>();
  const calls: string[] = [];
  const l = {
    down: false,
    live,
    calls,
    launcher: {
      name: "stand-in",
      intent: (spec: LaunchSpec): LaunchIntent => ({ launcher: "stand-in", data: { rentalId: spec.rentalId } }),
      async start(spec: LaunchSpec): Promise<LaunchHandle> {
        live.add(spec.rentalId);
        return { launcher: "stand-in", url: "http://gpu/lab", data: { rentalId: spec.rentalId } };
      },
      probe: async (h: LaunchHandle) => (live.has(h.data.rentalId as string) ? "ready" : "dead"),
      async stop(h: LaunchHandle) {
        calls.push("stop");
        if (l.down) throw new Error("the daemon does not answer");
        live.delete(h.data.rentalId as string);
      },
      async reclaim(i: LaunchIntent) {
        calls.push("reclaim");
        if (l.down) throw new Error("the daemon does not answer");
        live.delete(i.data.rentalId as string);
      },
      logs: async () => "",
      health: async () => null,
    } satisfies Launcher,
  };
  return l;
}

async function setup() {
  const dir = tempDir();
  dirs.push(dir);
  const db = openStore(dir, { synchronous: "normal" });
  const clock = new ManualClock(Date.UTC(2026, 10, 1, 9, 0, 0));
  const config = validateConfig({});
  const accounts = createAccountService(sqliteAccountStore(db), config.limits, clock);
  await accounts.createAccount("lab", { creditMicros: 5_000_000 });
  const principal = (await accounts.authenticate((await accounts.createKey({ account: "lab", kind: "premium", scopes: ["inference", "rental"] })).key))!;
  const other = (await accounts.authenticate((await accounts.createKey({ account: "lab", kind: "premium", scopes: ["inference", "rental"] })).key))!;
  const fake = standIn();
  const rentals = createRentalsService({ store: sqliteRentalStore(db), meter: createMeter(db, config, createLimits(db, config.limits, clock), clock), clock, logger: memoryLogger(), dataDir: dir, nodes: () => [NODE], launchers: { "stand-in": fake.launcher }, maxHours: 720, readyTimeoutMs: 60_000 });
  return { db, clock, accounts, principal, other, fake, rentals };
}

test("a stop the launcher cannot finish leaves the rental stopping and its node unlisted, billing ended; the ticks retry it every 30 s until it succeeds", async () => {
  const s = await setup();
  const made = await s.rentals.create(s.principal, { node_id: NODE.node_id, type: "jupyter" }, null);
  await s.rentals.tick();
  expect(await s.rentals.get(s.principal, made.rental_id)).toMatchObject({ status: "running", billed_minutes: 1 });

  s.fake.down = true;
  const stopped = await s.rentals.remove(s.principal, made.rental_id);
  expect(stopped).toMatchObject({ status: "stopping", stop_reason: "user", billed_minutes: 1 });
  expect(await s.rentals.gpus()).toEqual([]);
  await expect(s.rentals.create(s.other, { node_id: NODE.node_id, type: "jupyter" }, null)).rejects.toThrow("it is rented");

  s.clock.advance(10_000);
  await s.rentals.tick();
  expect(s.fake.calls).toEqual(["stop"]); // not retried within 30 s
  s.clock.advance(20_000);
  await s.rentals.tick();
  await s.rentals.stop(); // waits for the stop the tick started
  expect(s.fake.calls).toEqual(["stop", "stop"]);
  expect(await s.rentals.get(s.principal, made.rental_id)).toMatchObject({ status: "stopping", billed_minutes: 1 });

  s.fake.down = false;
  s.clock.advance(3 * 60_000); // minutes pass while stopping: nothing more is billed
  await s.rentals.tick();
  await s.rentals.stop();
  expect(await s.rentals.get(s.principal, made.rental_id)).toMatchObject({ status: "stopped", stop_reason: "user", billed_minutes: 1 });
  expect(s.fake.live.size).toBe(0);
  expect((await s.rentals.gpus()).map((n) => n.node_id)).toEqual([NODE.node_id]);
});

test("a rental that fails is stopping, its node taken, until its launcher has stopped what it started; only then failed", async () => {
  const s = await setup();
  const made = await s.rentals.create(s.principal, { node_id: NODE.node_id, type: "jupyter" }, null);
  await s.rentals.tick();
  s.fake.down = true;
  s.fake.live.delete(made.rental_id); // the server dies; what it left behind cannot be stopped yet
  s.clock.advance(5_000);
  await s.rentals.tick();
  await s.rentals.stop();
  expect(await s.rentals.get(s.principal, made.rental_id)).toMatchObject({ status: "stopping", stop_reason: "error", failure: "the notebook server exited" });
  expect(await s.rentals.gpus()).toEqual([]);
  s.fake.down = false;
  s.clock.advance(30_000);
  await s.rentals.tick();
  await s.rentals.stop();
  expect(await s.rentals.get(s.principal, made.rental_id)).toMatchObject({ status: "failed", stop_reason: "error", failure: "the notebook server exited" });
  expect(await s.rentals.gpus()).toHaveLength(1);
});

test("a launch the server lost before storing its handle is reclaimed by its intent at the next start; if that fails the node stays taken", async () => {
  const s = await setup();
  const made = await s.rentals.create(s.principal, { node_id: NODE.node_id, type: "jupyter" }, null);
  await s.rentals.stop();
  // What a kill -9 between the start and the handle leaves: the intent, a live server, no handle.
  s.db.query("UPDATE rentals SET handle = NULL WHERE id = ?").run(made.rental_id);
  expect(s.fake.live.has(made.rental_id)).toBe(true);

  s.fake.down = true;
  await s.rentals.reconcile();
  expect(await s.rentals.get(s.principal, made.rental_id)).toMatchObject({ status: "stopping", stop_reason: "error", billed_minutes: 0 });
  expect(await s.rentals.gpus()).toEqual([]);
  s.fake.down = false;
  s.clock.advance(30_000);
  await s.rentals.tick();
  await s.rentals.stop();
  expect(s.fake.calls).toEqual(["reclaim", "reclaim"]);
  expect(s.fake.live.size).toBe(0);
  expect(await s.rentals.get(s.principal, made.rental_id)).toMatchObject({ status: "failed", billed_minutes: 0 });
  expect(await s.rentals.gpus()).toHaveLength(1);
});
