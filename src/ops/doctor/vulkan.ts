import { VULKAN_ICD_DIRS } from "../../3-engines/llama/runtime";
import { ok, warn, type Check, type Probes } from "./check";
import { parseLdconfig } from "./gpu";

// Vulkan as the chat engine would find it, without loading anything: the loader (libvulkan.so.1),
// the drivers' manifests (ICD json files), a GPU device node, and node-llama-cpp's Vulkan prebuilt.
// ggml skips CPU-type devices (Mesa's llvmpipe, "lvp") unless GGML_VK_VISIBLE_DEVICES is set, so
// llvmpipe counts as a device only then (the test suite sets it; the product never does).

export interface VulkanFacts {
  /** Where libvulkan.so.1 was found, or null. */
  loader: string | null;
  /** Driver manifests found; `cpu`: Mesa's llvmpipe (lvp), which computes on the CPU. */
  drivers: { file: string; cpu: boolean }[];
  /** A GPU device node: /dev/dri/renderD* or the NVIDIA driver's. */
  gpuNode: boolean;
  /** Folder of node-llama-cpp's Vulkan prebuilt (libggml-vulkan.so), or null when not installed. */
  llamaVulkan: string | null;
  /** GGML_VK_VISIBLE_DEVICES is set: ggml admits the devices it names, CPU-type ones included. */
  cpuAdmitted: boolean;
}

const LOADER = "libvulkan.so.1";
const LIB_DIRS = ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib"];

export async function gatherVulkan(probes: Pick<Probes, "run" | "env" | "readdir" | "nvidiaDevice" | "llamaVulkan">): Promise<VulkanFacts> {
  let loader: string | null = null;
  for (const bin of ["ldconfig", "/sbin/ldconfig"]) {
    try {
      const r = await probes.run([bin, "-p"]);
      if (r.code === 0) {
        loader = parseLdconfig(r.stdout).get(LOADER) ?? null;
        break;
      }
    } catch {}
  }
  const dirs = [...(probes.env.LD_LIBRARY_PATH ?? "").split(":").filter(Boolean), ...LIB_DIRS];
  loader ??= dirs.map((d) => (probes.readdir(d).includes(LOADER) ? `${d}/${LOADER}` : null)).find((x) => x) ?? null;
  const drivers = VULKAN_ICD_DIRS.flatMap((d) => probes.readdir(d).filter((f) => f.endsWith(".json")).map((f) => ({ file: `${d}/${f}`, cpu: /^lvp_icd/.test(f) })));
  const gpuNode = probes.readdir("/dev/dri").some((f) => f.startsWith("renderD")) || probes.nvidiaDevice();
  return { loader, drivers, gpuNode, llamaVulkan: probes.llamaVulkan(), cpuAdmitted: probes.env.GGML_VK_VISIBLE_DEVICES !== undefined };
}

/** Whether the chat engine's Vulkan build would find a device here, and if not, why and what to do. */
export function vulkanUsable(v: VulkanFacts): { ok: true; how: string } | { ok: false; why: string; hint: string } {
  if (!v.llamaVulkan)
    return { ok: false, why: "node-llama-cpp's Vulkan prebuilt is not installed", hint: `reinstall with optional dependencies (\`bun install\`): node-llama-cpp ships it as @node-llama-cpp/${process.platform}-${process.arch}-vulkan` };
  if (!v.loader) return { ok: false, why: "the Vulkan loader (libvulkan.so.1) is not installed", hint: "install the Vulkan loader (Debian/Ubuntu: `apt install libvulkan1`)" };
  const gpuDrivers = v.drivers.filter((d) => !d.cpu);
  if (gpuDrivers.length && v.gpuNode) return { ok: true, how: `Vulkan driver${gpuDrivers.length > 1 ? "s" : ""} ${gpuDrivers.map((d) => base(d.file)).join(", ")} and a GPU device node` };
  if (v.cpuAdmitted && v.drivers.some((d) => d.cpu)) return { ok: true, how: "Mesa's llvmpipe (a CPU-type device, admitted by GGML_VK_VISIBLE_DEVICES)" };
  if (!v.gpuNode) return { ok: false, why: "no GPU device node (/dev/dri/renderD*, /dev/nvidiactl)", hint: "the GPU's kernel driver must be loaded first" };
  return {
    ok: false,
    why: "no Vulkan driver for a GPU is installed (no ICD json besides llvmpipe's)",
    hint: "install the GPU driver's Vulkan part: NVIDIA's comes with its driver (nvidia_icd.json; Debian: nvidia-vulkan-icd, Ubuntu: libnvidia-gl-<version>); AMD and Intel: `apt install mesa-vulkan-drivers`",
  };
}

/** The Vulkan line of the GPU report: what is installed; a warning only where a GPU is there to use. */
export function checkVulkan(v: VulkanFacts): Check {
  const name = "vulkan";
  const drivers = v.drivers.length ? v.drivers.map((d) => `${base(d.file)}${d.cpu ? " (llvmpipe, CPU)" : ""}`).join(", ") : "none";
  const detail = `loader ${v.loader ?? "not found"}; drivers: ${drivers}; GPU device node: ${v.gpuNode ? "yes" : "none"}; node-llama-cpp Vulkan build: ${v.llamaVulkan ? "installed" : "not installed"}`;
  const u = vulkanUsable(v);
  if (u.ok) return ok(name, `usable by the chat engine through ${u.how}; ${detail}`);
  if (!v.gpuNode) return ok(name, `not needed (no GPU); ${detail}`);
  return warn(name, `not usable: ${u.why}; ${detail}`, u.hint);
}

const base = (path: string) => path.slice(path.lastIndexOf("/") + 1);
