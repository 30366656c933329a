import { dlopen, FFIType, ptr } from "bun:ffi";
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
//           device here, "vulkan:0", named after them all. Its `maxTensorBytes` is the largest
//           tensor ggml's Vulkan backend can run an operation on, on the device it allows least
//           (vulkanTensorLimits below): llama.cpp aborts the process on a larger K or V cache.
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
  /** The Vulkan devices' limits (tests); default: the Vulkan loader's answer (readVulkanLimits). */
  vulkanLimits?: () => VulkanDeviceLimits[] | null;
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
    const limit = vulkanTensorLimit((o.vulkanLimits ?? readVulkanLimits)());
    if (limit.problem) problems.push(limit.problem);
    const device: DeviceInfo = {
      id: "vulkan:0",
      kind: "vulkan",
      name: names.join(" + "),
      totalMb,
      freeMb: Math.floor(vram.free / 2 ** 20),
      budgetMb: cap(totalMb, o.gpuBudgetMb),
      maxTensorBytes: limit.bytes,
    };
    return [device];
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

// ---- Vulkan's largest tensor --------------------------------------------------------------------
//
// ggml's Vulkan backend (ggml-vulkan.cpp, ggml_vk_get_device and ggml_backend_vk_device_supports_op)
// refuses an operation on a tensor larger than
//   max_buffer_size          VkPhysicalDeviceMaintenance4Properties.maxBufferSize with
//                            VK_KHR_maintenance4, else Maintenance3's maxMemoryAllocationSize
//                            (an allocation above maxMemoryAllocationSize fails outright)
//   maxStorageBufferRange    VkPhysicalDeviceLimits', unless the device has VK_EXT_shader_64bit_indexing
// and the scheduler aborts the process ("pre-allocated tensor in a buffer that cannot run the
// operation") when such a tensor was allocated on the device: a layer's K or V cache is. Weights are
// not at risk (llama.cpp keeps a weight the device cannot use in RAM) nor are activations (the
// scheduler runs those operations on the CPU). ggml uses the devices GGML_VK_VISIBLE_DEVICES names,
// else every discrete and integrated GPU; llama.cpp splits a model over all of them, so the least
// limit among them is the device's. Measured on Mesa's llvmpipe: maxStorageBufferRange 128 MiB,
// no 64-bit indexing; a 128 MiB K loads, 192 MiB aborts.

/** What the Vulkan specification guarantees of maxStorageBufferRange: the limit when the device's is unknown. */
export const VULKAN_MIN_TENSOR_LIMIT = 2 ** 27;

export interface VulkanDeviceLimits {
  name: string;
  /** VkPhysicalDeviceType: 1 integrated, 2 discrete, 4 CPU. */
  type: number;
  maxStorageBufferRange: number;
  /** min(maxMemoryAllocationSize, maxBufferSize where VK_KHR_maintenance4 gives it). */
  maxBufferBytes: number;
  /** VK_EXT_shader_64bit_indexing: the storage buffer range does not apply. */
  indexing64: boolean;
}

/** The largest tensor ggml can run operations on over the devices it uses; the spec's minimum, and why, when unknown. */
export function vulkanTensorLimit(devices: VulkanDeviceLimits[] | null, visible = process.env.GGML_VK_VISIBLE_DEVICES): { bytes: number; problem?: string } {
  const unknown = (why: string) => ({ bytes: VULKAN_MIN_TENSOR_LIMIT, problem: `Vulkan: ${why}; a layer's K or V cache is kept to the 128 MiB every Vulkan device allows` });
  if (!devices) return unknown("cannot read the devices' buffer limits from the Vulkan loader");
  const used =
    visible !== undefined
      ? visible
          .split(/[\s,]+/)
          .filter(Boolean)
          .map((i) => devices[Number(i)])
      : devices.filter((d) => d.type === 1 || d.type === 2);
  const limits = used.filter((d): d is VulkanDeviceLimits => d !== undefined).map((d) => (d.indexing64 ? d.maxBufferBytes : Math.min(d.maxStorageBufferRange, d.maxBufferBytes)));
  if (!limits.length) return unknown("the Vulkan loader lists none of the devices ggml uses");
  return { bytes: Math.min(...limits) };
}

let vulkanLimitsRead: VulkanDeviceLimits[] | null | undefined;

/**
 * Each Vulkan physical device's limits, in the loader's order (ggml's device indices), from a
 * Vulkan instance of our own (libvulkan.so.1 through bun:ffi; read once a process). Null when the
 * loader is missing or fails.
 */
export function readVulkanLimits(): VulkanDeviceLimits[] | null {
  if (vulkanLimitsRead !== undefined) return vulkanLimitsRead;
  try {
    vulkanLimitsRead = queryVulkan();
  } catch {
    vulkanLimitsRead = null;
  }
  return vulkanLimitsRead;
}

/** The bytes of the tensor ggml's Vulkan backend allows, for a profile's dry-run guard: the devices' own, else the spec's minimum. */
export function vulkanMaxTensorBytes(): number {
  return vulkanTensorLimit(readVulkanLimits()).bytes;
}

// Structure types and layouts from vulkan_core.h (x86_64 / aarch64: 8-byte pointers and alignment).
const S_PROPERTIES_2 = 1000059001;
const S_MAINTENANCE_3 = 1000168000;
const S_MAINTENANCE_4 = 1000413001;
const API_1_1 = (1 << 22) | (1 << 12);
const PROPS = 16; // VkPhysicalDeviceProperties inside VkPhysicalDeviceProperties2
const EXTENSION_SIZE = 260; // VkExtensionProperties: char[256] name, uint32 specVersion

function queryVulkan(): VulkanDeviceLimits[] | null {
  const vk = dlopen("libvulkan.so.1", {
    vkCreateInstance: { args: [FFIType.ptr, FFIType.ptr, FFIType.ptr], returns: FFIType.i32 },
    vkDestroyInstance: { args: [FFIType.u64, FFIType.ptr], returns: FFIType.void },
    vkEnumeratePhysicalDevices: { args: [FFIType.u64, FFIType.ptr, FFIType.ptr], returns: FFIType.i32 },
    vkEnumerateDeviceExtensionProperties: { args: [FFIType.u64, FFIType.ptr, FFIType.ptr, FFIType.ptr], returns: FFIType.i32 },
    vkGetPhysicalDeviceProperties2: { args: [FFIType.u64, FFIType.ptr], returns: FFIType.void },
  });
  try {
    const app = Buffer.alloc(48); // VkApplicationInfo: sType 0, apiVersion at 44
    app.writeUInt32LE(API_1_1, 44);
    const create = Buffer.alloc(64); // VkInstanceCreateInfo: sType 1, pApplicationInfo at 24
    create.writeUInt32LE(1, 0);
    create.writeBigUInt64LE(BigInt(ptr(app)), 24);
    const handle = Buffer.alloc(8);
    if (vk.symbols.vkCreateInstance(ptr(create), null, ptr(handle)) !== 0) return null;
    const instance = handle.readBigUInt64LE(0);
    try {
      const count = Buffer.alloc(4);
      if (vk.symbols.vkEnumeratePhysicalDevices(instance, ptr(count), null) !== 0) return null;
      if (count.readUInt32LE(0) === 0) return [];
      const list = Buffer.alloc(8 * count.readUInt32LE(0));
      if (vk.symbols.vkEnumeratePhysicalDevices(instance, ptr(count), ptr(list)) < 0) return null;
      const out: VulkanDeviceLimits[] = [];
      for (let i = 0; i < count.readUInt32LE(0); i++) {
        const device = list.readBigUInt64LE(8 * i);
        const n = Buffer.alloc(4);
        vk.symbols.vkEnumerateDeviceExtensionProperties(device, null, ptr(n), null);
        const exts = Buffer.alloc(EXTENSION_SIZE * Math.max(1, n.readUInt32LE(0)));
        vk.symbols.vkEnumerateDeviceExtensionProperties(device, null, ptr(n), ptr(exts));
        const names = new Set<string>();
        for (let j = 0; j < n.readUInt32LE(0); j++) names.add(cString(exts, EXTENSION_SIZE * j, 256));
        const m4 = Buffer.alloc(24); // sType, pNext, maxBufferSize at 16
        m4.writeUInt32LE(S_MAINTENANCE_4, 0);
        const m3 = Buffer.alloc(32); // sType, pNext, maxPerSetDescriptors, maxMemoryAllocationSize at 24
        m3.writeUInt32LE(S_MAINTENANCE_3, 0);
        const maintenance4 = names.has("VK_KHR_maintenance4");
        if (maintenance4) m3.writeBigUInt64LE(BigInt(ptr(m4)), 8);
        const props = Buffer.alloc(PROPS + 824); // sType, pNext, VkPhysicalDeviceProperties
        props.writeUInt32LE(S_PROPERTIES_2, 0);
        props.writeBigUInt64LE(BigInt(ptr(m3)), 8);
        vk.symbols.vkGetPhysicalDeviceProperties2(device, ptr(props));
        const allocation = Number(m3.readBigUInt64LE(24));
        out.push({
          name: cString(props, PROPS + 20, 256),
          type: props.readUInt32LE(PROPS + 16),
          // VkPhysicalDeviceLimits starts at 296 (8-aligned after pipelineCacheUUID); maxStorageBufferRange is its 8th uint32
          maxStorageBufferRange: props.readUInt32LE(PROPS + 296 + 28),
          maxBufferBytes: maintenance4 ? Math.min(allocation, Number(m4.readBigUInt64LE(16))) : allocation,
          indexing64: names.has("VK_EXT_shader_64bit_indexing"),
        });
      }
      return out;
    } finally {
      vk.symbols.vkDestroyInstance(instance, null);
    }
  } finally {
    vk.close();
  }
}

const cString = (b: Buffer, at: number, max: number) => {
  const s = b.subarray(at, at + max);
  const end = s.indexOf(0);
  return s.subarray(0, end < 0 ? max : end).toString("utf8");
};
