import { beforeAll, describe, expect, test } from "bun:test";
import { ensureChatModel } from "../../models/cache";
import type { ModelManifest } from "../../src/lib/manifest";
import { fitModel } from "../../src/3-engines/planner/fit";
import { profileModel } from "../../src/3-engines/planner/profile";
import type { DeviceInfo, Fit, Footprint, LoadSettings, LoadWants, ModelProfile, Room } from "../../src/3-engines/planner/types";

// Fitting over the profiles of generated chat GGUFs and made-up devices: every answer is checked
// against the profile itself (what was chosen fits; one step more would not).

const dev = (id: string, name: string, mb: number): DeviceInfo => ({ id, kind: id.startsWith("cpu") ? "cpu" : "cuda", name, totalMb: mb, freeMb: mb, budgetMb: mb });
const RTX = (availableMb: number): Room => ({ device: dev("cuda:0", "NVIDIA GeForce RTX 4090", 24564), availableMb });
const CPU = (availableMb: number): Room => ({ device: dev("cpu", "host RAM", 65536), availableMb });
const wants = (o: Partial<LoadWants> = {}): LoadWants => ({ devices: ["cuda"], gpuLayers: "auto", contextSize: "auto", slots: "auto", maxContext: 1 << 20, maxSlots: 1, minContext: 256, ...o });
const manifest = (id: string): ModelManifest => ({ id, name: id, kind: "chat", files: { model: "m" }, max_context: 4096, vision: false, slots: 1, load: "first_use" });
const at = (gpuLayers: number, contextSize: number, slots = 1): LoadSettings => ({ device: "cuda", gpuLayers, contextSize, slots });

/** The profile, counting the footprints asked of it. */
function counted(p: ModelProfile): ModelProfile & { calls: number } {
  const c = Object.assign(Object.create(p) as ModelProfile, { calls: 0 });
  c.footprint = (s) => {
    c.calls++;
    return p.footprint(s);
  };
  return c as ModelProfile & { calls: number };
}

let bench: ModelProfile; // 11 layers, trained for 4,096 tokens, ~67 MB of weights, 10 KiB of cache a token
let long: ModelProfile; // 3 layers, trained for 65,536 tokens, 256 bytes of cache a token
const gpuMb = async (p: ModelProfile, s: LoadSettings) => (await p.footprint(s)).gpuMb;

beforeAll(async () => {
  const [b, l] = await Promise.all([ensureChatModel("bench-64m"), ensureChatModel("long-chat")]);
  bench = await profileModel(manifest("bench-64m"), () => b);
  long = await profileModel(manifest("long-chat"), () => l);
});

describe("on a GPU with room", () => {
  test("every layer, the trained context (never above it) and as many slots as allowed", async () => {
    const fit = await fitModel(bench, wants({ maxSlots: 4 }), [RTX(2000)], CPU(8000));
    expect(fit).toMatchObject({ ok: true, device: "cuda:0", settings: { device: "cuda", gpuLayers: 11, contextSize: 4096, slots: 4 } });
    if (fit.ok) expect(fit.footprint).toEqual(await bench.footprint(fit.settings));
  });

  test("the configured maximum caps the context below the trained one", async () => {
    const fit = await fitModel(long, wants({ maxContext: 10_000 }), [RTX(2000)], CPU(8000));
    expect(fit).toMatchObject({ ok: true, settings: { gpuLayers: 3, contextSize: 9984, slots: 1 } });
  });

  test("a tight GPU: the largest context that fits, a multiple of 256", async () => {
    const room = await gpuMb(long, at(3, 20_480));
    const fit = await fitModel(long, wants({ minContext: 2048 }), [RTX(room)], CPU(8000));
    expect(fit.ok).toBe(true);
    if (!fit.ok) return;
    const { contextSize } = fit.settings;
    expect(fit.settings.gpuLayers).toBe(3);
    expect(contextSize % 256).toBe(0);
    expect(contextSize).toBeGreaterThanOrEqual(20_480);
    expect(fit.footprint.gpuMb).toBeLessThanOrEqual(room);
    expect(await gpuMb(long, at(3, contextSize + 256))).toBeGreaterThan(room);
  });

  test("context before slots: slots fill what the full context leaves", async () => {
    const room = await gpuMb(bench, at(11, 4096, 3));
    expect(await gpuMb(bench, at(11, 4096, 4))).toBeGreaterThan(room);
    const fit = await fitModel(bench, wants({ maxSlots: 8 }), [RTX(room)], CPU(8000));
    expect(fit).toMatchObject({ ok: true, settings: { gpuLayers: 11, contextSize: 4096, slots: 3 } });
  });

  test("fixed numbers are taken as given, a context above the trained one included", async () => {
    const fit = await fitModel(bench, wants({ gpuLayers: 7, contextSize: 8192, slots: 2 }), [RTX(2000)], CPU(8000));
    expect(fit).toMatchObject({ ok: true, settings: { device: "cuda", gpuLayers: 7, contextSize: 8192, slots: 2 } });
  });
});

describe("partial offload", () => {
  // Every layer fits with a shorter context: full offload wins down to minContext.
  test("every layer at a shorter context while that is above the minimum", async () => {
    const room = await gpuMb(bench, at(11, 2048));
    const fit = await fitModel(bench, wants({ minContext: 1024 }), [RTX(room)], CPU(8000));
    expect(fit).toMatchObject({ ok: true, settings: { gpuLayers: 11, slots: 1 } });
    if (fit.ok) expect(fit.settings.contextSize).toBeGreaterThanOrEqual(2048);
    if (fit.ok) expect(fit.settings.contextSize).toBeLessThan(4096);
  });

  test("else the context first and then the most layers that fit, the rest in RAM", async () => {
    const room = await gpuMb(bench, at(6, 4096));
    const fit = await fitModel(bench, wants({ maxSlots: 4, minContext: 3072 }), [RTX(room)], CPU(8000));
    expect(fit.ok).toBe(true);
    if (!fit.ok) return;
    const g = fit.settings.gpuLayers;
    expect(g).toBeGreaterThanOrEqual(6);
    expect(g).toBeLessThan(bench.layers);
    expect(fit.settings).toMatchObject({ contextSize: 4096, slots: 1 });
    expect(fit.footprint.gpuMb).toBeLessThanOrEqual(room);
    expect(await gpuMb(bench, at(g + 1, 4096))).toBeGreaterThan(room);
    expect(fit.footprint.cpuMb).toBeGreaterThan((await bench.footprint(at(bench.layers, 4096))).cpuMb);
  });

  test("RAM too short for the layers left on the CPU: fewer layers will not do, more might", async () => {
    // 8 layers fit the GPU; RAM holds what 8 leave behind but not what 5 leave
    const room = await gpuMb(bench, at(8, 4096));
    const ram = (await bench.footprint(at(8, 4096))).cpuMb;
    expect((await bench.footprint(at(5, 4096))).cpuMb).toBeGreaterThan(ram);
    const fit = await fitModel(bench, wants({ minContext: 4096 }), [RTX(room)], CPU(ram));
    expect(fit).toMatchObject({ ok: true, settings: { gpuLayers: 8, contextSize: 4096 } });
    if (fit.ok) expect(fit.footprint.cpuMb).toBeLessThanOrEqual(ram);
  });

  test("a few dozen footprints, the same answer every time", async () => {
    const room = await gpuMb(bench, at(6, 4096));
    const p = counted(bench);
    const a = await fitModel(p, wants({ maxSlots: 4, minContext: 2048 }), [RTX(room)], CPU(8000));
    expect(a).toMatchObject({ ok: true, settings: { gpuLayers: 6 } });
    expect(p.calls).toBeLessThan(60);
    const b = await fitModel(bench, wants({ maxSlots: 4, minContext: 2048 }), [RTX(room)], CPU(8000));
    expect(b).toEqual(a);
  });
});

describe("devices in order", () => {
  test("the next GPU when the first is too small", async () => {
    const small: Room = { device: dev("cuda:0", "NVIDIA GeForce RTX 3060", 12288), availableMb: 20 };
    const big: Room = { device: dev("cuda:1", "NVIDIA H100 80GB HBM3", 81559), availableMb: 80_000 };
    const fit = await fitModel(bench, wants({ gpuLayers: 11 }), [small, big], CPU(8000));
    expect(fit).toMatchObject({ ok: true, device: "cuda:1", settings: { gpuLayers: 11 } });
  });

  test("the CPU when it is allowed and no GPU has room", async () => {
    const fit = await fitModel(bench, wants({ devices: ["cuda", "cpu"], gpuLayers: 11 }), [RTX(20)], CPU(8000));
    expect(fit).toMatchObject({ ok: true, device: "cpu", settings: { device: "cpu", gpuLayers: 0, contextSize: 4096 } });
    if (fit.ok) expect(fit.footprint.gpuMb).toBe(0);
  });
});

describe("refusals", () => {
  test("too big for the GPU: the MB missing with the settings it was tried with", async () => {
    const need = await gpuMb(bench, at(11, 2048));
    const fit = await fitModel(bench, wants({ gpuLayers: 11, contextSize: 2048, slots: 1 }), [RTX(50)], CPU(8000), "bench-64m");
    expect(fit).toEqual({
      ok: false,
      missingMb: need - 50,
      reason: `bench-64m needs ${need} MB on cuda:0 (NVIDIA GeForce RTX 4090) with 11 of 11 layers, a 2,048-token context × 1 slot; 50 MB are free for it: ${need - 50} MB missing`,
    });
  });

  test("auto layers: the least missing over every split between GPU and RAM, at the smallest context", async () => {
    const [gpuRoom, ram] = [30, 20];
    const fit = await fitModel(bench, wants({ minContext: 512 }), [RTX(gpuRoom)], CPU(ram), "bench-64m");
    let least = Infinity;
    for (let g = 1; g <= bench.layers; g++) {
      const f: Footprint = await bench.footprint(at(g, 512));
      least = Math.min(least, Math.max(f.gpuMb - gpuRoom, f.cpuMb - ram));
    }
    expect(fit.ok).toBe(false);
    if (fit.ok) return;
    expect(fit.missingMb).toBe(least);
    expect(fit.reason).toMatch(/^bench-64m needs [\d,]+ MB (of RAM beside [\d,]+ MB )?on cuda:0 \(NVIDIA GeForce RTX 4090\) with \d+ of 11 layers, a 512-token context × 1 slot; /);
    expect(fit.reason).toEndWith(`${least} MB missing`);
  });

  test("the closest device is named; the others are listed", async () => {
    const need = await gpuMb(bench, at(11, 4096));
    const fit = await fitModel(bench, wants({ devices: ["cuda", "cpu"], gpuLayers: 11, contextSize: 4096 }), [RTX(need - 5)], CPU(10), "bench-64m");
    expect(fit).toMatchObject({ ok: false, missingMb: 5 });
    if (!fit.ok) expect(fit.reason).toMatch(/^bench-64m needs [\d,]+ MB on cuda:0 .*: 5 MB missing \(also tried cpu: [\d,]+ MB missing\)$/);
  });

  test("no device of the kinds wanted", async () => {
    const fit = await fitModel(bench, wants({ devices: ["vulkan"] }), [RTX(20_000)], CPU(8000), "bench-64m");
    expect(fit).toMatchObject({ ok: false, reason: expect.stringMatching(/^bench-64m can run on vulkan, and there is no such device here/) });
    if (!fit.ok) expect(fit.missingMb).toBeGreaterThan(0);
  });

  test("a minimum context above what the model was trained for", async () => {
    const fit = await fitModel(bench, wants({ minContext: 8192 }), [RTX(20_000)], CPU(8000), "bench-64m");
    expect(fit).toEqual({ ok: false, missingMb: 0, reason: "bench-64m cannot have the 8,192-token context it needs at least: its trained context is 4,096 tokens and the configured maximum 1,048,576" });
  });
});

// A made-up chat profile: 4 layers, trained for 128k tokens, 2 KiB of K a token in each layer (8 KV
// heads of 128, f16, as qwen3-1.7b); 25 MB of weights a layer and 1 MB a 1k cells (all of them on
// the GPU once a layer is: a simplification), 10 MB of RAM beside; on the CPU all of it in RAM and
// `gpuOnCpu` MB on the runtime's GPU (llama.cpp's compute buffer).
function madeUp(o: { runtimeGpu?: "vulkan" | "cuda"; gpuOnCpu?: number } = {}): ModelProfile & { asked: LoadSettings[] } {
  const asked: LoadSettings[] = [];
  const K_PER_TOKEN = 2048;
  return {
    kind: "chat",
    layers: 4,
    trainedContext: 131_072,
    fileBytes: 100 * 2 ** 20,
    asked,
    runtimeGpu: o.runtimeGpu,
    largestTensorBytes: (s) => (s.device !== "cpu" && s.gpuLayers >= 2 ? s.contextSize * s.slots * K_PER_TOKEN : 0),
    footprint: async (s) => {
      asked.push(s);
      const cache = Math.ceil((s.contextSize * s.slots) / 1024);
      const g = s.device === "cpu" ? 0 : s.gpuLayers;
      const gpuMb = g > 0 ? 25 * g + cache : (o.gpuOnCpu ?? 0);
      const cpuMb = 25 * (4 - g) + (g > 0 ? 10 : cache);
      return { gpuMb, cpuMb, parts: { weightsMb: 100, cacheMb: cache, computeMb: gpuMb + cpuMb - 100 - cache, projectorMb: 0 } };
    },
  };
}
const MiB = 2 ** 20;
const VULKAN = (availableMb: number, maxTensorBytes?: number): Room => {
  const device: DeviceInfo = { id: "vulkan:0", kind: "vulkan", name: "llvmpipe (LLVM 15.0.6, 256 bits)", totalMb: 65536, freeMb: 65536, budgetMb: 65536, maxTensorBytes };
  return { device, availableMb };
};
const tensorOf = (s: LoadSettings) => s.contextSize * s.slots * 2048;

describe("a device's largest tensor (Vulkan)", () => {
  test("an auto context stops where a layer's K would outgrow the device's largest tensor", async () => {
    const p = madeUp();
    const fit = await fitModel(p, wants({ devices: ["vulkan"], maxSlots: 4 }), [VULKAN(60_000, 128 * MiB)], CPU(8000));
    // 65,536 tokens × 2 KiB = 128 MiB: at the limit; one slot more or 256 tokens more is over it
    expect(fit).toMatchObject({ ok: true, device: "vulkan:0", settings: { gpuLayers: 4, contextSize: 65_536, slots: 1 } });
    // no footprint (a Vulkan dry run) was asked for settings over the limit
    expect(p.asked.filter((s) => tensorOf(s) > 128 * MiB)).toEqual([]);
  });

  test("auto slots stop there too; without a limit the same model takes the room it has", async () => {
    const fit = await fitModel(madeUp(), wants({ devices: ["vulkan"], maxContext: 16_384, maxSlots: 8 }), [VULKAN(60_000, 128 * MiB)], CPU(8000));
    expect(fit).toMatchObject({ ok: true, settings: { contextSize: 16_384, slots: 4 } });
    const free = await fitModel(madeUp(), wants({ devices: ["vulkan"], maxSlots: 4 }), [VULKAN(60_000)], CPU(8000));
    expect(free).toMatchObject({ ok: true, settings: { contextSize: 131_072, slots: 4 } });
  });

  test("a partial offload keeps to the limit as well", async () => {
    const p = madeUp();
    // 90 MB: not every layer even at 1k tokens; 2 layers and 32k tokens (64 MiB of K) at most
    const fit = await fitModel(p, wants({ devices: ["vulkan"], minContext: 1024, maxSlots: 4 }), [VULKAN(90, 64 * MiB)], CPU(8000));
    expect(fit).toMatchObject({ ok: true, settings: { gpuLayers: 2, contextSize: 32_768, slots: 1 } });
    expect(p.asked.filter((s) => tensorOf(s) > 64 * MiB)).toEqual([]);
  });

  test("fixed settings over the limit are refused with the reason, not loaded to abort", async () => {
    const fit = await fitModel(madeUp(), wants({ devices: ["vulkan"], contextSize: 98_304, slots: 1 }), [VULKAN(60_000, 128 * MiB)], CPU(8000), "qwen3");
    expect(fit).toEqual({
      ok: false,
      missingMb: 0,
      reason:
        "qwen3 cannot run on vulkan:0 (llvmpipe (LLVM 15.0.6, 256 bits)) with 4 of 4 layers, a 98,304-token context × 1 slot: one layer's K or V cache would be 192 MiB, more than the 128 MiB the device allows a tensor (llama.cpp would abort); a shorter context or fewer slots fit",
    });
  });

  test("refused on the GPU for its tensor, the model goes to the CPU where allowed; memory shortfalls come first in a refusal", async () => {
    const onCpu = await fitModel(madeUp(), wants({ devices: ["vulkan", "cpu"], contextSize: 98_304, slots: 1 }), [VULKAN(60_000, 128 * MiB)], CPU(8000));
    expect(onCpu).toMatchObject({ ok: true, device: "cpu", settings: { device: "cpu", contextSize: 98_304 } });
    const none = await fitModel(madeUp(), wants({ devices: ["vulkan", "cpu"], contextSize: 98_304, slots: 1 }), [VULKAN(60_000, 128 * MiB)], CPU(50), "qwen3");
    expect(none).toMatchObject({ ok: false, missingMb: 196 - 50 });
    if (!none.ok) expect(none.reason).toMatch(/^qwen3 needs 196 MB of RAM on the CPU .* \(also tried vulkan:0: a K or V cache over its largest tensor\)$/);
  });
});

describe("a CPU placement inside a GPU runtime", () => {
  test("its compute buffer must fit the runtime's GPU, which the fit names", async () => {
    const p = madeUp({ runtimeGpu: "vulkan", gpuOnCpu: 25 });
    const fit = await fitModel(p, wants({ devices: ["cpu"], maxContext: 4096 }), [RTX(20_000), VULKAN(30)], CPU(8000));
    expect(fit).toMatchObject({ ok: true, device: "cpu", gpuDevice: "vulkan:0", settings: { device: "cpu", contextSize: 4096 }, footprint: { gpuMb: 25 } });
  });

  test("no room for it there: refused, saying where", async () => {
    const p = madeUp({ runtimeGpu: "vulkan", gpuOnCpu: 25 });
    const fit = await fitModel(p, wants({ devices: ["cpu"], maxContext: 4096 }), [VULKAN(20)], CPU(8000), "m");
    expect(fit).toEqual({
      ok: false,
      missingMb: 5,
      reason:
        "m needs 25 MB on vulkan:0 (llvmpipe (LLVM 15.0.6, 256 bits)) beside 101 MB of RAM on the CPU with a 256-token context × 1 slot (llama.cpp computes a CPU model's prompts on its vulkan GPU); 20 MB are free for it there: 5 MB missing",
    });
    const gone = await fitModel(p, wants({ devices: ["cpu"], maxContext: 4096 }), [], CPU(8000), "m");
    expect(gone).toMatchObject({ ok: false, missingMb: 25, reason: expect.stringMatching(/^m needs 25 MB on a vulkan device beside its RAM .* no such device is usable: 25 MB missing$/) });
  });

  test("a CPU runtime's CPU placement needs no GPU", async () => {
    const fit = (await fitModel(madeUp(), wants({ devices: ["cpu"], maxContext: 4096 }), [], CPU(8000))) as Extract<Fit, { ok: true }>;
    expect(fit).toMatchObject({ ok: true, device: "cpu", footprint: { gpuMb: 0 } });
    expect(fit.gpuDevice).toBeUndefined();
  });
});
