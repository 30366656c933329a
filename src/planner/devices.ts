import { readFileSync } from "node:fs";
import { freemem, totalmem } from "node:os";
import type { Llama } from "node-llama-cpp";
import type { DeviceInfo } from "./types";

// The devices models can be placed on and their memory, as the host reports it now:
//   cpu     /proc/meminfo's MemTotal and MemAvailable (what can be had without swapping), else
//           Node's totalmem/freemem
//   cuda    nvidia-smi's query, one row per GPU (index, UUID, name, total/used/free in MiB)
//   vulkan  a node-llama-cpp Llama on its Vulkan build: getVramState() and getGpuDeviceNames().
//           node-llama-cpp sums the memory of all the devices that build uses, so they are one
//           device here, "vulkan:0", named after them all.
// Budgets cap what the appliance's models may hold on a device: min(total, cap); 0 or none: the total.
// A source that fails gives no devices of its kind and a problem (a sentence) instead.

export const NVIDIA_SMI_QUERY = ["nvidia-smi", "--query-gpu=index,uuid,name,memory.total,memory.used,memory.free", "--format=csv,noheader,nounits"];

/** Runs a command; resolves with its stdout, rejects when it cannot start or exits non-zero. */
export type CommandRunner = (argv: string[]) => Promise<string>;

export interface DiscoverOptions {
  /** Cap on what models may hold on each GPU, in MB (0/undefined: its total). */
  gpuBudgetMb?: number;
  /** Cap on what models may hold in host RAM, in MB (0/undefined: the total). */
  cpuBudgetMb?: number;
  /** Runs nvidia-smi (tests inject one); default: spawn it, 5 s at most. */
  run?: CommandRunner;
  /** Skip the nvidia-smi query (a host without NVIDIA's driver). */
  cuda?: boolean;
  /** The chat engine's llama.cpp runtime: on its Vulkan build, the Vulkan device's memory. */
  llama?: Llama;
  /** /proc/meminfo's text (tests); default: read it. */
  meminfo?: () => string;
}

export interface Discovered {
  devices: DeviceInfo[];
  problems: string[];
}

const cap = (total: number, budget?: number) => (budget && budget > 0 ? Math.min(total, budget) : total);

/** MemTotal and MemAvailable in MB, or null when the text lacks them. */
export function parseMeminfo(text: string): { totalMb: number; availableMb: number } | null {
  const kb = (key: string) => {
    const m = new RegExp(`^${key}:\\s+(\\d+)\\s*kB`, "m").exec(text);
    return m ? Number(m[1]) : null;
  };
  const total = kb("MemTotal");
  const available = kb("MemAvailable");
  if (total === null || available === null) return null;
  return { totalMb: Math.floor(total / 1024), availableMb: Math.floor(available / 1024) };
}

/** nvidia-smi's CSV rows (the query above) → CUDA devices; rows it cannot read are problems. */
export function parseNvidiaSmi(text: string, gpuBudgetMb?: number): Discovered {
  const devices: DeviceInfo[] = [];
  const problems: string[] = [];
  for (const line of text.split("\n").map((l) => l.trim()).filter(Boolean)) {
    const cols = line.split(",").map((c) => c.trim());
    const [index, uuid, name, total, used, free] = cols;
    const numbers = [index, total, used, free].map((v) => (v !== undefined && /^\d+$/.test(v) ? Number(v) : NaN));
    if (cols.length !== 6 || numbers.some(Number.isNaN) || !uuid || !name) {
      // "[N/A]", "[Not Supported]" and the like: a GPU whose memory nvidia-smi cannot tell
      problems.push(`nvidia-smi: cannot read "${line}"`);
      continue;
    }
    const [i, totalMb, , freeMb] = numbers as [number, number, number, number];
    devices.push({ id: `cuda:${i}`, kind: "cuda", name, uuid, totalMb, freeMb, budgetMb: cap(totalMb, gpuBudgetMb) });
  }
  return { devices, problems };
}

const spawnRunner: CommandRunner = async (argv) => {
  const child = Bun.spawn(argv, { stdout: "pipe", stderr: "pipe", timeout: 5000 });
  const [out, err, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  if (code !== 0) throw new Error(`${argv[0]} exited with ${code}${err.trim() ? `: ${err.trim().split("\n")[0]}` : ""}`);
  return out;
};

function cpuDevice(o: DiscoverOptions, problems: string[]): DeviceInfo {
  let mem: { totalMb: number; availableMb: number } | null = null;
  try {
    mem = parseMeminfo((o.meminfo ?? (() => readFileSync("/proc/meminfo", "utf8")))());
  } catch {
    // not Linux, or /proc not mounted: Node's figures below
  }
  if (!mem) {
    mem = { totalMb: Math.floor(totalmem() / 2 ** 20), availableMb: Math.floor(freemem() / 2 ** 20) };
    if (process.platform === "linux") problems.push("/proc/meminfo has no MemTotal/MemAvailable: host RAM from os.totalmem/freemem (free memory counts no reclaimable cache)");
  }
  return { id: "cpu", kind: "cpu", name: "host RAM", totalMb: mem.totalMb, freeMb: mem.availableMb, budgetMb: cap(mem.totalMb, o.cpuBudgetMb) };
}

async function vulkanDevices(llama: Llama, o: DiscoverOptions, problems: string[]): Promise<DeviceInfo[]> {
  try {
    const [vram, names] = await Promise.all([llama.getVramState(), llama.getGpuDeviceNames()]);
    if (!names.length || vram.total <= 0) return [];
    const totalMb = Math.floor(vram.total / 2 ** 20);
    return [{ id: "vulkan:0", kind: "vulkan", name: names.join(" + "), totalMb, freeMb: Math.floor(vram.free / 2 ** 20), budgetMb: cap(totalMb, o.gpuBudgetMb) }];
  } catch (e) {
    problems.push(`Vulkan: cannot read the device's memory: ${(e as Error).message}`);
    return [];
  }
}

export async function discoverDevices(o: DiscoverOptions = {}): Promise<Discovered> {
  const problems: string[] = [];
  const devices: DeviceInfo[] = [cpuDevice(o, problems)];
  if (o.cuda !== false) {
    try {
      const found = parseNvidiaSmi(await (o.run ?? spawnRunner)(NVIDIA_SMI_QUERY), o.gpuBudgetMb);
      devices.push(...found.devices);
      problems.push(...found.problems);
    } catch (e) {
      // No nvidia-smi at all is a host without NVIDIA's driver, not a problem.
      const err = e as NodeJS.ErrnoException;
      if (err.code !== "ENOENT" && !/ENOENT|not found|No such file/i.test(err.message)) problems.push(`nvidia-smi failed: ${err.message}; no CUDA devices listed`);
    }
  }
  if (o.llama && o.llama.gpu === "vulkan") devices.push(...(await vulkanDevices(o.llama, o, problems)));
  return { devices, problems };
}
