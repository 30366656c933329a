import type { DeviceInfo, DeviceKind, Fit, Footprint, LoadSettings, LoadWants, ModelProfile, Room } from "./types";

// Settings for a model on the first device it fits, from its profile and the room each device
// has for it. Deterministic: the same profile, wants and rooms give the same answer; every search
// is a binary search over a monotone need (more layers, context or slots never need less memory
// on the GPU; fewer layers never need less RAM), so a fit costs tens of footprint questions, each
// memoised by the profile.
//
// The rules, for what the config leaves to `auto`:
//   devices  tried in the order wanted; each GPU of a wanted kind in the order given (callers put
//            the roomiest first if they want it tried first); "cpu" uses host RAM alone.
//   layers   all of them when they fit with the smallest context and slots allowed; else the
//            most that fit (partial offload), the rest in RAM.
//   context  a multiple of 256 from the smallest at or above minContext to min(trained context,
//            maxContext): the largest that fits. With every layer on the GPU, the context grows
//            only as far as the GPU holds it; with a partial offload the context is chosen first
//            and the layers after it: a model too big for the GPU is slow anyway, and a context
//            too short makes it useless (an agent's first prompt is 13-23k tokens).
//   slots    after the context: the most up to maxSlots at that context (a longer context serves
//            every request; another slot only adds parallelism). One slot in a partial offload:
//            the GPU is already short, and a slot's cache would cost layers.
// Fixed numbers are taken as given, above the trained context included (the config said so).
//
// Two more constraints, where the profile and the device tell them:
//   a CPU placement inside a GPU runtime still holds llama.cpp's compute buffer on the runtime's
//            GPU (ggml offloads a prompt's matrix products there, copying the weights over): its
//            footprint's gpuMb must fit the first room of `profile.runtimeGpu`'s kind, which the
//            fit names as `gpuDevice`.
//   a device's largest tensor (`maxTensorBytes`, Vulkan): llama.cpp aborts the process when one
//            layer's K or V cache is larger, so a GPU placement never has a context × slots whose
//            `profile.largestTensorBytes` exceeds it (an auto context stops below; fixed settings
//            are refused with the reason, and the next device is tried). Footprints are not even
//            asked for such settings: a Vulkan dry run of them would abort too.
// Image models' `contextSize` is the image side: auto is the largest a request may ask
// (profile.trainedContext); embedding and classifier models' is their max tokens.

const STEP = 256;
const fmt = (n: number) => Math.round(n).toLocaleString("en-US");

interface Tried {
  missingMb: number;
  sentence: string;
  device: string;
  /** Refused for a tensor over the device's limit, not for memory. */
  tensor?: boolean;
}

/** The largest integer in [lo, hi] for which `ok` holds (ok monotone: true then false), or lo - 1. */
async function largest(lo: number, hi: number, ok: (n: number) => Promise<boolean>): Promise<number> {
  if (hi < lo || !(await ok(lo))) return lo - 1;
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (await ok(mid)) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

const plural = (n: number, one: string, many = `${one}s`) => `${fmt(n)} ${n === 1 ? one : many}`;

function describe(profile: ModelProfile, s: LoadSettings): string {
  if (profile.kind === "chat") {
    const layers = s.device === "cpu" ? "" : `${fmt(s.gpuLayers)} of ${plural(profile.layers, "layer")}, `;
    return `with ${layers}${article(s.contextSize)} ${fmt(s.contextSize)}-token context × ${plural(s.slots, "slot")}`;
  }
  const size = profile.kind === "image" ? `${fmt(s.contextSize)}×${fmt(s.contextSize)} images` : `${fmt(s.contextSize)}-token inputs`;
  return `${size}, ${plural(s.slots, profile.kind === "image" ? "worker" : "slot")}`;
}

/** "an" before a number read aloud with a vowel first (8,192: "eight thousand…"; 11,000; 18,432), else "a". */
const article = (n: number) => (/^(8|1[18](,|$))/.test(fmt(n)) ? "an" : "a");

const label = (r: Room) => (r.device.kind === "cpu" ? "the CPU" : `${r.device.id} (${r.device.name})`);
const MiB = 2 ** 20;
const mib = (bytes: number) => fmt(Math.ceil(bytes / MiB));

export async function fitModel(profile: ModelProfile, wants: LoadWants, gpus: Room[], cpu: Room, name = "the model"): Promise<Fit> {
  const chat = profile.kind === "chat";
  const fp = (s: LoadSettings): Promise<Footprint> => profile.footprint(s);
  const limits = profile;

  // The context sizes allowed, as [cMin, cMax] in tokens (chat: multiples of 256 between them).
  let cMin: number;
  let cMax: number;
  if (typeof wants.contextSize === "number") cMin = cMax = wants.contextSize;
  else if (profile.kind === "image") cMin = cMax = profile.trainedContext ?? wants.maxContext;
  else if (!chat) cMin = cMax = Math.min(profile.trainedContext ?? wants.maxContext, wants.maxContext);
  else {
    const ceiling = Math.min(profile.trainedContext ?? wants.maxContext, wants.maxContext);
    cMax = ceiling >= STEP ? Math.floor(ceiling / STEP) * STEP : ceiling;
    cMin = Math.min(Math.max(STEP, Math.ceil(wants.minContext / STEP) * STEP), cMax);
    if (cMax < wants.minContext)
      return {
        ok: false,
        missingMb: 0,
        reason: `${name} cannot have the ${fmt(wants.minContext)}-token context it needs at least: its trained context is ${fmt(profile.trainedContext ?? 0)} tokens and the configured maximum ${fmt(wants.maxContext)}`,
      };
  }
  // a model trained for fewer than 256 tokens gets exactly that
  const stepped = chat && typeof wants.contextSize !== "number" && cMax >= STEP;
  const ctxAt = (k: number) => (stepped ? k * STEP : cMin);
  const kMin = stepped ? cMin / STEP : 0;
  const kMax = stepped ? Math.floor(cMax / STEP) : 0;
  const sMin = typeof wants.slots === "number" ? wants.slots : 1;
  const sMax = typeof wants.slots === "number" ? wants.slots : Math.max(1, wants.maxSlots);

  const tried: Tried[] = [];

  const onCpu = async (): Promise<Fit | null> => {
    const room = cpu.availableMb;
    const at = (c: number, s: number): LoadSettings => ({ device: "cpu", gpuLayers: 0, contextSize: c, slots: s });
    // Inside a GPU runtime the CPU placement's gpuMb is on that runtime's first GPU; none given: no room.
    const gpuRoom = gpus.find((r) => r.device.kind === limits.runtimeGpu) ?? null;
    const fitsIn = (f: Footprint) => f.cpuMb <= room && f.gpuMb <= (gpuRoom?.availableMb ?? 0);
    const fits = async (c: number, s: number) => fitsIn(await fp(at(c, s)));
    const k = await largest(kMin, kMax, (k) => fits(ctxAt(k), sMin));
    if (k < kMin) {
      const least = at(cMin, sMin);
      const f = await fp(least);
      const ram = f.cpuMb - room;
      const gpu = f.gpuMb - (gpuRoom?.availableMb ?? 0);
      const where = describe(profile, least);
      const sentence =
        ram >= gpu
          ? `${name} needs ${fmt(f.cpuMb)} MB of RAM on the CPU ${where}; ${fmt(room)} MB are free for it: ${fmt(ram)} MB missing`
          : gpuRoom
            ? `${name} needs ${fmt(f.gpuMb)} MB on ${label(gpuRoom)} beside ${fmt(f.cpuMb)} MB of RAM on the CPU ${where} (llama.cpp computes a CPU model's prompts on its ${limits.runtimeGpu} GPU); ${fmt(gpuRoom.availableMb)} MB are free for it there: ${fmt(gpu)} MB missing`
            : `${name} needs ${fmt(f.gpuMb)} MB on a ${limits.runtimeGpu ?? "GPU"} device beside its RAM on the CPU ${where} (llama.cpp computes a CPU model's prompts on the runtime's GPU), and no such device is usable: ${fmt(gpu)} MB missing`;
      tried.push({ device: "cpu", missingMb: Math.max(ram, gpu), sentence });
      return null;
    }
    const c = ctxAt(k);
    const s = await largest(sMin, sMax, (s) => fits(c, s));
    const settings = at(c, s);
    const footprint = await fp(settings);
    const placed: Extract<Fit, { ok: true }> = { ok: true, device: cpu.device.id, settings, footprint };
    if (footprint.gpuMb > 0 && gpuRoom) placed.gpuDevice = gpuRoom.device.id;
    return placed;
  };

  const onGpu = async (r: Room, kind: DeviceKind): Promise<Fit | null> => {
    const L = profile.layers;
    const at = (g: number, c: number, s: number): LoadSettings => ({ device: kind, gpuLayers: g, contextSize: c, slots: s });
    // The device's tensor limit, checked before any footprint is asked (monotone in context and slots).
    const limit = r.device.maxTensorBytes;
    const tensor = (c: number, s: number) => (limit !== undefined && limits.largestTensorBytes ? limits.largestTensorBytes(at(L, c, s)) : 0);
    const allowed = (c: number, s: number) => limit === undefined || tensor(c, s) <= limit;
    if (!allowed(cMin, sMin)) {
      tried.push({
        device: r.device.id,
        missingMb: 0,
        tensor: true,
        sentence: `${name} cannot run on ${label(r)} ${describe(profile, at(L, cMin, sMin))}: one layer's K or V cache would be ${mib(tensor(cMin, sMin))} MiB, more than the ${mib(limit!)} MiB the device allows a tensor (llama.cpp would abort); a shorter context or fewer slots fit`,
      });
      return null;
    }
    const gpuOk = async (g: number, c: number, s: number) => allowed(c, s) && (await fp(at(g, c, s))).gpuMb <= r.availableMb;
    const fits = async (g: number, c: number, s: number) => {
      if (!allowed(c, s)) return false;
      const f = await fp(at(g, c, s));
      return f.gpuMb <= r.availableMb && f.cpuMb <= cpu.availableMb;
    };
    const grow = async (g: number): Promise<Fit> => {
      const k = await largest(kMin, kMax, (k) => fits(g, ctxAt(k), sMin));
      const c = ctxAt(k);
      const s = await largest(sMin, sMax, (s) => fits(g, c, s));
      const settings = at(g, c, s);
      return { ok: true, device: r.device.id, settings, footprint: await fp(settings) };
    };
    const fixedG = !chat ? 1 : typeof wants.gpuLayers === "number" ? Math.min(L, Math.max(0, wants.gpuLayers)) : null;
    if (fixedG !== null) {
      if (await fits(fixedG, cMin, sMin)) return grow(fixedG);
      await shortfall(r, kind, [fixedG, fixedG]);
      return null;
    }
    if (await fits(L, cMin, sMin)) return grow(L);
    // Partial offload: for a context, the most layers the GPU holds (the least RAM beside them).
    const most = (c: number) => largest(1, L - 1, (g) => gpuOk(g, c, sMin));
    const feasible = async (c: number) => {
      const g = await most(c);
      return g >= 1 && (await fits(g, c, sMin));
    };
    const k = await largest(kMin, kMax, (k) => feasible(ctxAt(k)));
    if (k < kMin) {
      await shortfall(r, kind, [1, L]);
      return null;
    }
    const c = ctxAt(k);
    const settings = at(await most(c), c, sMin);
    return { ok: true, device: r.device.id, settings, footprint: await fp(settings) };
  };

  /** The least missing on `r` over the layer counts allowed, at the smallest context and slots. */
  const shortfall = async (r: Room, kind: DeviceKind, [gLo, gHi]: [number, number]) => {
    const short = async (g: number) => {
      const f = await fp({ device: kind, gpuLayers: g, contextSize: cMin, slots: sMin });
      return { g, f, gpu: f.gpuMb - r.availableMb, cpu: f.cpuMb - cpu.availableMb };
    };
    // GPU shortfall grows with layers, RAM shortfall shrinks: the least of their max is where they cross.
    const cross = await largest(gLo, gHi, async (g) => {
      const s = await short(g);
      return s.gpu <= s.cpu;
    });
    const candidates = await Promise.all([...new Set([cross, cross + 1].filter((g) => g >= gLo && g <= gHi))].map(short));
    const best = candidates.reduce((a, b) => (Math.max(b.gpu, b.cpu) < Math.max(a.gpu, a.cpu) ? b : a));
    const where = describe(profile, { device: kind, gpuLayers: best.g, contextSize: cMin, slots: sMin });
    const sentence =
      best.gpu >= best.cpu
        ? `${name} needs ${fmt(best.f.gpuMb)} MB on ${label(r)} ${where}; ${fmt(r.availableMb)} MB are free for it: ${fmt(best.gpu)} MB missing`
        : `${name} needs ${fmt(best.f.cpuMb)} MB of RAM beside ${fmt(best.f.gpuMb)} MB on ${label(r)} ${where}; ${fmt(cpu.availableMb)} MB of RAM are free for it: ${fmt(best.cpu)} MB missing`;
    tried.push({ device: r.device.id, missingMb: Math.max(best.gpu, best.cpu), sentence });
  };

  const absent: DeviceKind[] = [];
  for (const kind of wants.devices) {
    if (kind === "cpu") {
      const f = await onCpu();
      if (f) return f;
      continue;
    }
    const rooms = gpus.filter((r) => r.device.kind === kind);
    if (!rooms.length) absent.push(kind);
    for (const r of rooms) {
      const f = await onGpu(r, kind);
      if (f) return f;
    }
  }

  if (!tried.length) {
    const kinds = wants.devices.length ? wants.devices.join(" or ") : "no device";
    // Nothing to measure against: what it would take on the first GPU kind wanted, whole.
    const kind = wants.devices.find((d) => d !== "cpu") ?? "cuda";
    const f = await fp({ device: kind, gpuLayers: profile.layers, contextSize: cMin, slots: sMin });
    return { ok: false, missingMb: f.gpuMb, reason: `${name} can run on ${kinds}, and there is no such device here (it needs ${fmt(f.gpuMb)} MB on a GPU ${describe(profile, { device: kind, gpuLayers: profile.layers, contextSize: cMin, slots: sMin })})` };
  }
  // The closest device by memory; one refused for a tensor only when no device was short of memory.
  const memory = tried.filter((t) => !t.tensor);
  const best = (memory.length ? memory : tried).reduce((a, b) => (b.missingMb < a.missingMb ? b : a));
  const others = tried.filter((t) => t !== best).map((t) => `${t.device}: ${t.tensor ? "a K or V cache over its largest tensor" : `${fmt(t.missingMb)} MB missing`}`);
  const none = absent.length ? `; no usable ${absent.join(" or ")} device here` : "";
  return {
    ok: false,
    missingMb: best.missingMb,
    reason: `${best.sentence}${others.length ? ` (also tried ${others.join(", ")})` : ""}${none}`,
  };
}
