import type { DiscoveredGpu, RentalNode } from "./inventory";

// GPUs that inference uses are not rented out. The appliance's own CUDA_VISIBLE_DEVICES says which
// GPUs its CUDA engines may use (UUIDs or indexes, as CUDA reads it); unset, they may use every GPU.
// A Vulkan backend is not bound by that variable: it names the devices it computes on, and those are
// matched to the discovered GPUs by name. While any loaded model computes on a GPU, the nodes
// holding the GPUs it may use are reserved. Pure.

/** UUIDs (lower case) of the discovered GPUs visible to this process's CUDA engines. */
export function inferenceGpus(discovered: DiscoveredGpu[], cudaVisibleDevices: string | undefined): Set<string> {
  const all = discovered.map((g) => g.uuid.toLowerCase());
  if (cudaVisibleDevices === undefined) return new Set(all);
  const out = new Set<string>();
  for (const raw of cudaVisibleDevices.split(",")) {
    const item = raw.trim().toLowerCase();
    if (item === "") continue;
    if (/^\d+$/.test(item)) {
      const g = discovered.find((d) => d.index === Number(item));
      if (g) out.add(g.uuid.toLowerCase());
    } else {
      // CUDA accepts a unique prefix of a UUID (with or without "GPU-").
      const prefix = item.startsWith("gpu-") ? item : `gpu-${item}`;
      const hits = all.filter((u) => u.startsWith(prefix));
      if (hits.length === 1) out.add(hits[0]!);
    }
  }
  return out;
}

/** Node ids reserved for inference: those holding a GPU in `gpus`, while `onCuda` is true. */
export function reservedNodes(nodes: RentalNode[], gpus: ReadonlySet<string>, onCuda: boolean): Set<string> {
  if (!onCuda || gpus.size === 0) return new Set();
  return new Set(nodes.filter((n) => n.gpu_uuids.some((u) => gpus.has(u.toLowerCase()))).map((n) => n.node_id));
}

/** What gpusInUse needs of an engine: whether it is loaded, and where it computes. */
export interface EngineUse {
  loaded: boolean;
  device?: string;
  gpus?: readonly string[];
}

/**
 * UUIDs (lower case) of the discovered GPUs loaded models compute on: the CUDA-visible ones while a
 * model is on CUDA; for a model on Vulkan, the discovered GPUs named like its devices (Vulkan lists
 * names, not UUIDs, so every GPU of that name). A Vulkan device naming NVIDIA that matches no
 * discovered name reserves every discovered GPU, since which one it is cannot be told; any other
 * unmatched device (a GPU the inventory does not list, such as llvmpipe) reserves none. A model on
 * WebGPU (onnxruntime's Dawn) reserves every discovered GPU: Dawn picks its adapter itself, is not
 * bound by CUDA_VISIBLE_DEVICES, and does not say which GPU it took.
 */
export function gpusInUse(engines: readonly EngineUse[], cudaGpus: ReadonlySet<string>, discovered: readonly DiscoveredGpu[]): Set<string> {
  const out = new Set<string>();
  const loaded = engines.filter((e) => e.loaded);
  if (loaded.some((e) => e.device === "cuda")) for (const u of cudaGpus) out.add(u);
  if (loaded.some((e) => e.device === "webgpu")) for (const g of discovered) out.add(g.uuid.toLowerCase());
  const names = new Set(loaded.filter((e) => e.device === "vulkan").flatMap((e) => e.gpus ?? []));
  const norm = (s: string) => s.trim().toLowerCase();
  for (const name of names) {
    const same = discovered.filter((g) => norm(g.name) === norm(name));
    const hits = same.length ? same : /nvidia/i.test(name) ? discovered : [];
    for (const g of hits) out.add(g.uuid.toLowerCase());
  }
  return out;
}

/**
 * UUIDs (lower case) of the discovered GPUs a planner device is: its own UUID (CUDA); for a Vulkan
 * device, the discovered GPUs of its name (every discovered GPU when an NVIDIA name matches none,
 * as gpusInUse reads it); none for the CPU or a device the inventory does not list.
 */
export function deviceGpus(d: { kind: string; name: string; uuid?: string }, discovered: readonly DiscoveredGpu[]): string[] {
  if (d.kind === "cpu") return [];
  if (d.uuid) return [d.uuid.toLowerCase()];
  const norm = (s: string) => s.trim().toLowerCase();
  const same = discovered.filter((g) => norm(g.name) === norm(d.name));
  return (same.length ? same : /nvidia/i.test(d.name) ? discovered : []).map((g) => g.uuid.toLowerCase());
}
