import type { ModelManifest } from "../../lib/manifest";
import type { MemoryPlanner } from "../residency";
import type { DeviceInfo, Footprint, LoadSettings, Room } from "./types";

// The memory plan of a whole config, for `appliance doctor` (issue 28): where each model would go
// on this machine's devices as they are now, with nothing of the appliance's loaded. Models pinned
// by `load = "start"` are placed first (they load at start), then the others in config order, each
// on the memory the ones before it left. A model that does not fit beside them but fits on its own
// (with the other on-demand models unloaded) is loaded on demand, unloading idle models: the
// residency manager's rule. One that fits nowhere is refused at load, with the planner's reason.

export interface PlannedModel {
  id: string;
  kind: ModelManifest["kind"];
  pinned: boolean;
  /**
   * together: fits beside the models placed before it; alone: only once idle on-demand models are
   * unloaded; refused: cannot be loaded here; unread: its files could not be read.
   */
  fits: "together" | "alone" | "refused" | "unread";
  device?: string;
  settings?: LoadSettings;
  footprint?: Footprint;
  /** Chat: the model's offloadable layers (for "n of N layers"). */
  layers?: number;
  /** Why it was refused or not read. */
  reason?: string;
}

export interface MemoryPlan {
  devices: DeviceInfo[];
  models: PlannedModel[];
}

export interface PlanInput {
  manifest: ModelManifest;
  file(role: string): string;
}

export async function planModels(planner: MemoryPlanner, inputs: readonly PlanInput[]): Promise<MemoryPlan> {
  const devices = await planner.devices();
  const cpu = devices.find((d) => d.kind === "cpu")!;
  /** MB held per device id by models placed together so far, and by the pinned ones alone. */
  const all = new Map<string, number>();
  const pinnedOnly = new Map<string, number>();
  const rooms = (held: Map<string, number>): [Room[], Room] => {
    const room = (d: DeviceInfo) => ({ device: d, availableMb: Math.max(0, Math.min(d.budgetMb, d.freeMb) - (held.get(d.id) ?? 0)) });
    return [devices.filter((d) => d.kind !== "cpu").map(room), room(cpu)];
  };
  const hold = (held: Map<string, number>, device: string, f: Footprint) => {
    held.set(device, (held.get(device) ?? 0) + f.gpuMb);
    held.set(cpu.id, (held.get(cpu.id) ?? 0) + f.cpuMb);
  };
  const order = [...inputs].sort((a, b) => Number(b.manifest.load === "start") - Number(a.manifest.load === "start"));
  const planned = new Map<string, PlannedModel>();
  for (const { manifest: m, file } of order) {
    const pinned = m.load === "start";
    const base = { id: m.id, kind: m.kind, pinned };
    let profile;
    try {
      profile = await planner.profile(m, file);
    } catch (e) {
      planned.set(m.id, { ...base, fits: "unread", reason: (e as Error).message });
      continue;
    }
    const wants = planner.wants(m, devices);
    const layers = m.kind === "chat" ? profile.layers : undefined;
    const beside = await planner.fit(profile, wants, ...rooms(all), `"${m.id}"`);
    if (beside.ok) {
      hold(all, beside.gpuDevice ?? beside.device, beside.footprint);
      if (pinned) hold(pinnedOnly, beside.gpuDevice ?? beside.device, beside.footprint);
      planned.set(m.id, { ...base, fits: "together", device: beside.device, settings: beside.settings, footprint: beside.footprint, layers });
      continue;
    }
    // Pinned models load at start beside each other: one that does not fit is refused then.
    const alone = pinned ? beside : await planner.fit(profile, wants, ...rooms(pinnedOnly), `"${m.id}"`);
    planned.set(
      m.id,
      alone.ok
        ? { ...base, fits: "alone", device: alone.device, settings: alone.settings, footprint: alone.footprint, layers }
        : { ...base, fits: "refused", reason: alone.reason },
    );
  }
  return { devices, models: inputs.map((i) => planned.get(i.manifest.id)!) };
}
