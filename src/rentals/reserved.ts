import type { DiscoveredGpu, RentalNode } from "./inventory";

// GPUs that inference uses are not rented out. The appliance's own CUDA_VISIBLE_DEVICES says which
// GPUs its engines may use (UUIDs or indexes, as CUDA reads it); unset, they may use every GPU.
// While any loaded model computes on CUDA, the nodes holding those GPUs are reserved. Pure.

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
