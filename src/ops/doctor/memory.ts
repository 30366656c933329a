import type { MemoryPlan, PlannedModel } from "../../3-engines/planner/plan-all";
import type { DeviceInfo } from "../../3-engines/planner/types";
import { fail, ok, plural, warn, type Check } from "./check";

// The memory plan as doctor shows it (issue 28): the devices and their memory, then per model its
// device, layers offloaded, context × slots and MB, and whether it fits beside the others, only on
// its own (loaded on demand, unloading idle models), or not at all.

const NAME = "memory plan";
const mb = (n: number) => `${Math.round(n).toLocaleString("en-US")} MB`;

function deviceLine(d: DeviceInfo): string {
  const budget = d.budgetMb < d.totalMb ? `, ${mb(d.budgetMb)} allowed (engines.${d.kind === "cpu" ? "cpu" : "gpu"}_memory_mb)` : "";
  const what = d.kind === "cpu" ? "RAM" : `${d.id} (${d.name})`;
  return `${what}: ${mb(d.freeMb)} free of ${mb(d.totalMb)}${budget}`;
}

function modelLine(p: PlannedModel): string {
  const head = `${p.id} (${p.kind}${p.pinned ? ", load = start" : ""}): `;
  if (p.fits === "unread") return `${head}files not read (${p.reason})`;
  if (p.fits === "refused") return `${head}cannot be loaded here: ${p.reason}`;
  const s = p.settings!;
  const f = p.footprint!;
  const parts = [p.device!];
  if (p.kind === "chat") {
    if (s.device !== "cpu") parts.push(`${s.gpuLayers} of ${p.layers} layers`);
    parts.push(`${s.contextSize.toLocaleString("en-US")} tokens × ${plural(s.slots, "slot")}`);
  } else if (p.kind === "image") parts.push(`${s.contextSize}×${s.contextSize} images × ${plural(s.slots, "worker")}`);
  else parts.push(`${s.contextSize.toLocaleString("en-US")}-token inputs`);
  const memory = [f.gpuMb > 0 ? `${mb(f.gpuMb)} GPU` : "", f.cpuMb > 0 ? `${mb(f.cpuMb)} RAM` : ""].filter(Boolean).join(" + ") || "0 MB";
  const when = p.fits === "alone" ? "; loaded on demand, unloading idle models (does not fit beside the models above)" : "";
  return `${head}${parts.join(", ")}, ${memory}${when}`;
}

export function checkMemoryPlan(plan: MemoryPlan | { error: string }): Check {
  if ("error" in plan) return warn(NAME, `not worked out: ${plan.error}`, "the server plans at load time all the same; see its log");
  if (!plan.models.length) return ok(NAME, `no models in the config; ${plan.devices.map(deviceLine).join("; ")}`);
  const lines = [...plan.devices.map(deviceLine), ...plan.models.map(modelLine)];
  const count = (f: PlannedModel["fits"]) => plan.models.filter((m) => m.fits === f);
  const [refused, alone, unread] = [count("refused"), count("alone"), count("unread")];
  const n = plan.models.length;
  if (refused.length) {
    const ids = refused.map((m) => m.id).join(", ");
    const pinned = refused.some((m) => m.pinned);
    return fail(
      NAME,
      [`${plural(refused.length, "model")} of ${n} cannot be loaded on this machine: ${ids}`, ...lines].join("\n"),
      `lower their context, slots or gpu_layers (or set them to "auto"), raise engines.gpu_memory_mb / cpu_memory_mb if set${pinned ? ', or make pinned models load = "first_use"' : ""}`,
    );
  }
  if (unread.length) return warn(NAME, [`${plural(unread.length, "model")} not planned: ${unread.map((m) => m.id).join(", ")}`, ...lines].join("\n"), "see the model lines above");
  const summary = alone.length
    ? `${n - alone.length} of ${n} models fit at once; ${alone.map((m) => m.id).join(", ")} load on demand, in turn`
    : n === 1
      ? "the model fits"
      : `all ${n} models fit at once`;
  return ok(NAME, [summary, ...lines].join("\n"));
}
