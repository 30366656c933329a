import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { TestApp } from "../../helpers/app";

// Shared by the rental tests: GPU nodes declared in config, served by the real process launcher
// running the stand-in JupyterLab (test/fixtures/rentals/fake-jupyter.ts).

export const FAKE_JUPYTER = join(import.meta.dir, "../../fixtures/rentals/fake-jupyter.ts");

export const GPU_UUIDS = [
  "GPU-5f1c2b1e-9d4a-4c3e-8f2a-0a1b2c3d4e5f",
  "GPU-6a2d3c2f-0e5b-4d4f-9a3b-1b2c3d4e5f60",
  "GPU-7b3e4d30-1f6c-4e50-ab4c-2c3d4e5f6071",
];

export function rentalNode(i: number, price = 0.6) {
  return { gpu_uuid: GPU_UUIDS[i]!, gpu: "NVIDIA GeForce RTX 4090", vram_mb: 24564, compute_cap: 8.9, country: "Germany", country_code: "DE", price_per_hour: price, launcher: "process" };
}

/** Config for `nodes` declared GPUs; `args` go to the stand-in (e.g. `--die-after-ms=…`). */
/** Rentals are reached directly on their own port here unless `access: "proxy"` (the config's default). */
export function rentalConfig(o: { nodes?: number; price?: number; args?: string[]; readyTimeoutS?: number; maxHours?: number; command?: string[]; access?: "proxy" | "direct" } = {}) {
  return {
    rental_nodes: Array.from({ length: o.nodes ?? 1 }, (_, i) => rentalNode(i, o.price)),
    rentals: {
      discover: false,
      access: o.access ?? "direct",
      process: { command: o.command ?? [process.execPath, FAKE_JUPYTER, ...(o.args ?? [])], bind: "127.0.0.1" },
      public_host: "127.0.0.1",
      ready_timeout_s: o.readyTimeoutS ?? 20,
      ...(o.maxHours === undefined ? {} : { max_hours: o.maxHours }),
    },
  };
}

export async function until<T>(fn: () => Promise<T>, ok: (v: T) => boolean, ms = 20_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (ok(v) || Date.now() > end) return v;
    await Bun.sleep(50);
  }
}

/** Whether a rental has ended: stopped, or failed (a failing one is `stopping` until its process is gone). */
export const ended = <T extends { status: string }>(r: T): boolean => r.status === "stopped" || r.status === "failed";

export const getRental = (t: TestApp, key: string, id: string) => t.request("GET", `/api/v1/rentals/${id}`, { key }).then((r) => r.json() as Promise<any>);

export async function nodeIds(t: TestApp, key: string): Promise<string[]> {
  const res = await t.request("GET", "/api/v1/gpus", { key });
  return ((await res.json()) as any).data.map((n: any) => n.node_id);
}

/** Pids of live processes started for `rentalId` (found by the launcher's environment tag). */
export function processesOf(rentalId: string): number[] {
  const pids: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      if (/\) Z /.test(stat)) continue;
      if (readFileSync(`/proc/${name}/environ`, "utf8").split("\0").includes(`APPLIANCE_RENTAL_ID=${rentalId}`)) pids.push(Number(name));
    } catch {}
  }
  return pids;
}
