import { afterAll, describe, expect, test } from "bun:test";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { join } from "node:path";
import { ConfigError } from "../../src/lib/config";
import type { Probes } from "../../src/ops/doctor/check";
import { runDoctor } from "../../src/ops/doctor/doctor";
import { checkChatDecoding, checkChatEngine, checkImageInput, checkOnnxEngines, checkThreads, type Served } from "../../src/ops/doctor/engines";
import { checkDataDir, checkDisk, checkModels, checkPort } from "../../src/ops/doctor/files";
import { checkCudaRuntime, checkCudaSourceBuild, checkGpus, gatherCuda, gatherGpus, parseGpuQuery, parseLdconfig } from "../../src/ops/doctor/gpu";
import { systemProbes } from "../../src/ops/doctor/probes";
import { tempDir } from "../helpers/app";
import { chatModel, configIn, embedModel, facts, fakeProbes, GiB, gpuHost, H100, LDCONFIG_CUDA, LDCONFIG_PLAIN, LLAMA_CUDA, MiB, MISMATCH, ONNX_DIR, runner, served } from "./fakes";

const dir = tempDir();
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const config = configIn(dir);


describe("gpus", () => {
  const cases: { name: string; probes: Partial<Probes>; status: string; detail: RegExp }[] = [
    { name: "no nvidia-smi and no NVIDIA device is CPU only, not a failure", probes: {}, status: "ok", detail: /^CPU only/ },
    {
      name: "two GPUs are listed with name, memory and driver",
      probes: { run: runner({ "nvidia-smi": { code: 0, stdout: H100 } }), nvidiaDevice: () => true },
      status: "ok",
      detail: /^2 GPUs, driver 580\.65\.06: #0 NVIDIA H100 80GB HBM3 \(80 GiB\), #1 NVIDIA H100/,
    },
    {
      name: "a driver/library mismatch is a warning that says to reboot",
      probes: { run: runner({ "nvidia-smi": { code: 18, stdout: MISMATCH } }), nvidiaDevice: () => true },
      status: "warn",
      detail: /no usable GPU: nvidia-smi exited with 18: Failed to initialize NVML: Driver\/library version mismatch \(.*reboot/,
    },
    {
      name: "a driver that finds no device on a machine without one is CPU only",
      probes: { run: runner({ "nvidia-smi": { code: 6, stdout: "No devices were found\n" } }) },
      status: "ok",
      detail: /^CPU only \(nvidia-smi exited with 6: No devices were found/,
    },
    {
      name: "an NVIDIA device without nvidia-smi is a warning",
      probes: { nvidiaDevice: () => true },
      status: "warn",
      detail: /NVIDIA device is present but nvidia-smi is not found/,
    },
  ];
  for (const c of cases) {
    test(c.name, async () => {
      const check = checkGpus(await gatherGpus(fakeProbes(c.probes)));
      expect(check.status).toBe(c.status as "ok");
      expect(check.detail).toMatch(c.detail);
      expect(check.hint === undefined).toBe(c.status === "ok");
    });
  }

  test("a GPU name holding a comma is put back together", () => {
    expect(parseGpuQuery("0, NVIDIA RTX A6000, Ada, 49140, 570.86.15\n")).toEqual({
      gpus: [{ index: 0, name: "NVIDIA RTX A6000, Ada", memory_mib: 49140, driver: "570.86.15" }],
      problem: null,
    });
  });
});

describe("cuda runtime and the chat engine", () => {
  test("ldconfig lines map each library to its path", () => {
    const libs = parseLdconfig(LDCONFIG_CUDA);
    expect(libs.get("libcudart.so.13")).toBe("/usr/local/cuda-13.0/lib64/libcudart.so.13");
    expect(libs.get("libc.so.6")).toBe("/lib/x86_64-linux-gnu/libc.so.6");
    expect(parseLdconfig(LDCONFIG_PLAIN).has("libcudart.so.13")).toBe(false);
  });

  test("with the CUDA libraries in the linker cache, the chat engine uses CUDA", async () => {
    const { g, c } = await facts(gpuHost());
    expect(c.libs["libcudnn.so.9"]).toBe("/usr/lib/x86_64-linux-gnu/libcudnn.so.9");
    expect(checkCudaRuntime(g, c)).toMatchObject({ status: "ok", detail: expect.stringMatching(/^driver 580\.65\.06 \(runs CUDA ≤ 13\.x\); found libcudart\.so\.13/) });
    const cfg = config({ models: [chatModel] });
    expect(checkChatEngine(cfg, served(cfg), g, c)).toMatchObject({ status: "ok", detail: expect.stringContaining("llama.cpp → cuda (NVIDIA device present; CUDA 13 build") });
  });

  test("without them, auto falls back to CPU with a warning, and device = cuda fails", async () => {
    const { g, c } = await facts(gpuHost({ run: runner({ "nvidia-smi": { code: 0, stdout: H100 }, ldconfig: { code: 0, stdout: LDCONFIG_PLAIN } }) }));
    expect(c.libs["libcudart.so.13"]).toBeNull();
    const runtime = checkCudaRuntime(g, c);
    expect(runtime.status).toBe("warn");
    expect(runtime.detail).toContain("missing libcudart.so.13, libcublas.so.13");
    expect(runtime.hint).toContain("CUDA 13 runtime");
    const auto = config({ models: [chatModel] });
    const chat = checkChatEngine(auto, served(auto), g, c);
    expect(chat.status).toBe("warn");
    expect(chat.detail).toContain("cpu (CUDA wanted: NVIDIA device present; not usable: libcudart.so.13 / libcublas.so.13 not found)");
    const forced = config({ models: [chatModel], engines: { device: "cuda" } });
    expect(checkChatEngine(forced, served(forced), g, c).status).toBe("fail");
    // Nobody uses the chat engine: nothing to fail.
    const unused = config({ engines: { device: "cuda" } });
    expect(checkChatEngine(unused, [], g, c).status).toBe("warn");
  });

  test("libraries are also found on LD_LIBRARY_PATH, beside the CUDA build, and via /sbin/ldconfig", async () => {
    const c = await gatherCuda(
      gpuHost({
        run: runner({ "/sbin/ldconfig": { code: 0, stdout: "\tlibcudnn.so.9 (libc6,x86-64) => /opt/cudnn/libcudnn.so.9" } }),
        env: { LD_LIBRARY_PATH: "/opt/cuda12/lib:" },
        readdir: (d) => (d === "/opt/cuda12/lib" ? ["libcudart.so.12", "libcublas.so.12"] : d === LLAMA_CUDA.primary ? ["libggml-cuda.so", "libcudart.so.13"] : []),
      }),
    );
    expect(c.libs).toEqual({
      "libcudart.so.13": `${LLAMA_CUDA.primary}/libcudart.so.13`,
      "libcublas.so.13": null,
      "libcudart.so.12": "/opt/cuda12/lib/libcudart.so.12",
      "libcublas.so.12": "/opt/cuda12/lib/libcublas.so.12",
      "libcudnn.so.9": "/opt/cudnn/libcudnn.so.9",
    });
  });

  test("a driver too old for CUDA 13 is named as the reason", async () => {
    const old = H100.replaceAll("580.65.06", "550.54.15");
    const { g, c } = await facts(gpuHost({ run: runner({ "nvidia-smi": { code: 0, stdout: old }, ldconfig: { code: 0, stdout: LDCONFIG_CUDA } }) }));
    const cfg = config({ models: [chatModel] });
    const chat = checkChatEngine(cfg, served(cfg), g, c);
    expect(chat.detail).toContain("driver 550.54.15 runs CUDA ≤ 12.x, the CUDA build needs 13");
    expect(checkCudaRuntime(g, c).hint).toContain("driver ≥ 580");
  });

  test("on a CPU-only machine the chat engine uses the CPU because there is no NVIDIA device", async () => {
    const { g, c } = await facts(fakeProbes());
    const cfg = config({ models: [chatModel] });
    expect(checkChatEngine(cfg, served(cfg), g, c)).toEqual({ name: "chat engine", status: "ok", detail: "llama.cpp → cpu (no NVIDIA device); 1 chat model" });
    expect(checkCudaRuntime(g, c).detail).toStartWith("not needed (CPU only)");
  });
});

describe("onnx engines", () => {
  test("with the provider files and a CUDA runtime + cuDNN 9 the ONNX models use CUDA (this host has CUDA 13 and 12)", async () => {
    const { g, c } = await facts(gpuHost());
    const cfg = config({ models: [embedModel] });
    expect(checkOnnxEngines(cfg, served(cfg), g, c)).toMatchObject({ status: "ok", detail: "onnxruntime → cuda (NVIDIA device present; provider files, CUDA 13, CUDA 12 and cuDNN 9 found): minilm" });
  });

  test("the provider without cuDNN 9: a warning whose fix is install.sh --cuda", async () => {
    const noCudnn = LDCONFIG_CUDA.split("\n").filter((l) => !l.includes("libcudnn")).join("\n");
    const { g, c } = await facts(gpuHost({ run: runner({ "nvidia-smi": { code: 0, stdout: H100 }, ldconfig: { code: 0, stdout: noCudnn } }) }));
    const cfg = config({ models: [embedModel] });
    const check = checkOnnxEngines(cfg, served(cfg), g, c);
    expect(check).toMatchObject({ status: "warn", detail: expect.stringContaining("the provider's CUDA runtime and cuDNN 9 are missing (libcudnn.so.9)") });
    expect(check.hint).toStartWith("./install.sh --cuda");
  });

  test("missing provider files: a warning naming where they go; a model forcing cuda fails", async () => {
    const { g, c } = await facts(gpuHost({ readdir: () => ["libonnxruntime.so.1"] }));
    const cfg = config({ models: [embedModel, { ...embedModel, id: "forced", device: "cuda" }, { ...embedModel, id: "small", device: "cpu" }] });
    const check = checkOnnxEngines(cfg, served(cfg), g, c);
    expect(check.status).toBe("fail");
    expect(check.detail).toContain("missing (libonnxruntime_providers_shared.so, libonnxruntime_providers_cuda.so)): minilm");
    expect(check.detail).toContain('cpu (device = "cpu"): small');
    expect(check.hint).toContain(`into ${ONNX_DIR}`);
    const auto = config({ models: [embedModel] });
    expect(checkOnnxEngines(auto, served(auto), g, c).status).toBe("warn");
  });
});

describe("onnx engines on WebGPU and under engines.device = vulkan", () => {
  test("a model asking for WebGPU: ok with an adapter, a failure naming the probe's reason without one", async () => {
    const { g, c } = await facts(fakeProbes());
    const cfg = config({ models: [{ ...embedModel, device: "webgpu" }] });
    expect(checkOnnxEngines(cfg, served(cfg), g, c, null)).toMatchObject({ status: "ok", detail: 'onnxruntime → webgpu (device = "webgpu"; adapter found): minilm' });
    const none = checkOnnxEngines(cfg, served(cfg), g, c, "Failed to get a WebGPU adapter: No supported adapters");
    expect(none).toMatchObject({ status: "fail", detail: expect.stringContaining("not loaded (WebGPU wanted: device = \"webgpu\"; not usable: no WebGPU adapter found: Failed to get a WebGPU adapter") });
    expect(none.hint).toContain("libvulkan1");
  });

  test("engines.device = vulkan means auto for ONNX models, and says so", async () => {
    const { g, c } = await facts(fakeProbes());
    const cfg = config({ models: [embedModel], engines: { device: "vulkan" } });
    expect(checkOnnxEngines(cfg, served(cfg), g, c)).toMatchObject({ status: "ok", detail: expect.stringContaining('cpu (engines.device = "vulkan" (the chat engine\'s backend): as auto; no NVIDIA device): minilm') });
  });
});

describe("image input and threads", () => {
  const vision = { ...chatModel, id: "gemma", vision: true, files: { model: "g.gguf", mmproj: "p.gguf" } };
  test("an unbuilt addon is a warning, and a failure when a configured model takes images", () => {
    const none = checkImageInput({ path: null }, []);
    expect(none).toMatchObject({ status: "warn", detail: expect.stringContaining("not built: image input is unavailable") });
    expect(none.hint).toStartWith("./install.sh");
    const needed = checkImageInput({ path: null }, served(config({ models: [vision] })));
    expect(needed).toMatchObject({ status: "fail", detail: "llama addon not built, but gemma takes image input" });
    expect(checkImageInput({ path: "/a.node" }, served(config({ models: [vision] }))).status).toBe("ok");
  });

  test("chat decoding: the decode loop when the addon is built; without it a chat model fails the check", () => {
    const chat: Served[] = [{ id: "qwen", kind: "chat" }];
    expect(checkChatDecoding({ path: "/a.node" }, chat)).toEqual({
      name: "chat decoding",
      status: "ok",
      detail: "native decode loop and persistent CPU threadpool (idle workers poll at 10 before sleeping; llama addon); steps of all generating slots together, flash attention where the device has it (llama.cpp's \"auto\"); prompt batches of 512 tokens (models' batch_size)",
    });
    const without = checkChatDecoding({ path: null }, chat);
    expect(without.status).toBe("fail");
    expect(without.detail).toBe("no decode loop: the llama addon is not built, and qwen is a chat model");
    expect(without.hint).toStartWith("./install.sh");
    expect(checkChatDecoding({ path: null }, []).status).toBe("ok");
  });

  test("threads show engines.threads and the cores, and warn past the cores", () => {
    expect(checkThreads(config(), 4)).toEqual({ name: "threads", status: "ok", detail: "4 per model (engines.threads = 0: one per core); 4 cores" });
    const over = checkThreads(config({ engines: { threads: 2 }, models: [{ ...chatModel, threads: 16 }] }), 8);
    expect(over.status).toBe("warn");
    expect(over.detail).toBe("2 per model (engines.threads = 2); 8 cores; set per model: qwen 16");
  });
});

describe("model files, data dir, disk", () => {
  test("a missing model file fails with its path and the pull hint; a present one shows its size", () => {
    mkdirSync(join(dir, "models", "minilm"), { recursive: true });
    writeFileSync(join(dir, "models", "minilm", "model.onnx"), Buffer.alloc(3 * 1024 * 1024));
    const cfg = config({ models: [chatModel, embedModel] });
    const [qwen, minilm] = checkModels(cfg, systemProbes());
    expect(qwen).toEqual({
      name: "model qwen",
      status: "fail",
      detail: `files.model not found: ${join(dir, "models", "qwen.gguf")}`,
      hint: "appliance models pull qwen, or fix models[0].files.model in the config",
    });
    expect(minilm).toEqual({ name: "model minilm", status: "ok", detail: "embedding, model 3.0 MiB" });
  });

  test("an empty model file fails too (an interrupted download)", () => {
    writeFileSync(join(dir, "models", "qwen.gguf"), "");
    const [qwen] = checkModels(config({ models: [chatModel] }), systemProbes());
    expect(qwen!.status).toBe("fail");
    expect(qwen!.detail).toStartWith("files.model is empty");
  });

  test("no models at all is fine", () => {
    expect(checkModels(config(), systemProbes())).toEqual([{ name: "models", status: "ok", detail: expect.stringContaining("none configured") }]);
  });

  const disk = (free: number) => checkDisk("/srv/data", fakeProbes({ kind: (p) => (p === "/srv" ? "dir" : "missing"), statfs: (p) => (p === "/srv" ? { free, total: 100 * GiB } : { free: 0, total: 0 }) }));
  test.each([
    [100 * GiB, "ok"],
    [3 * GiB, "warn"],
    [100 * MiB, "fail"],
  ])("%p bytes free on the data dir's filesystem → %s", (free, status) => {
    const check = disk(free);
    expect(check.status).toBe(status as "ok");
    expect(check.detail).toContain("free of 100 GiB");
  });

  test("the real statfs reports the temp dir's filesystem", () => {
    const check = checkDisk(join(dir, "not-yet", "data"), systemProbes());
    expect(check.detail).toMatch(/^\d[\d.]* \w+ free of \d[\d.]* \w+ on the data dir's filesystem/);
  });

  test("a data dir that cannot be written fails; a missing one under a writable parent is fine", () => {
    const unwritable = checkDataDir("/srv/data", fakeProbes({ kind: () => "dir", writable: () => false }));
    expect(unwritable).toMatchObject({ status: "fail", detail: "/srv/data is not writable by this user" });
    expect(checkDataDir(join(dir, "a", "b"), systemProbes())).toMatchObject({ status: "ok", detail: expect.stringContaining("created at first start") });
    writeFileSync(join(dir, "plain-file"), "x");
    expect(checkDataDir(join(dir, "plain-file"), systemProbes()).status).toBe("fail");
  });
});

describe("port", () => {
  let held: Server | undefined;
  afterAll(() => held?.close());

  test("a port another process listens on fails and points at server.pid", async () => {
    held = createServer();
    await new Promise<void>((r) => held!.listen(0, "127.0.0.1", () => r()));
    const port = (held.address() as { port: number }).port;
    mkdirSync(join(dir, "data"), { recursive: true });
    writeFileSync(join(dir, "data", "server.pid"), "4242\n");
    const check = await checkPort({ host: "127.0.0.1", port, data_dir: join(dir, "data") }, systemProbes());
    expect(check.status).toBe("fail");
    expect(check.detail).toBe(
      `another process listens on ${port} (is the appliance already running? \`appliance serve\` writes server.pid in the data dir; it names pid 4242)`,
    );
    await new Promise((r) => held!.close(r));
    held = undefined;
    expect(await checkPort({ host: "127.0.0.1", port, data_dir: join(dir, "data") }, systemProbes())).toEqual({ name: "port", status: "ok", detail: `127.0.0.1:${port} is free` });
  });

  test("an address that is not this machine's fails with a hint", async () => {
    const check = await checkPort({ host: "127.0.0.1", port: 8484, data_dir: dir }, fakeProbes({ listen: async () => "EADDRNOTAVAIL" }));
    expect(check).toMatchObject({ status: "fail", hint: expect.stringContaining("server.host") });
  });
});

describe("cuda source build", () => {
  const gpu = { nvidiaDevice: true, smiFound: true, gpus: [{ index: 0, name: "NVIDIA H100 80GB HBM3", memory_mib: 81559, driver: "580.159" }], problem: null };
  const none = { nvidiaDevice: false, smiFound: false, gpus: [], problem: null };
  test("a build made here names its architectures, toolkit and folder; without one, whether nvcc could make one", () => {
    expect(checkCudaSourceBuild(gpu, { archs: ["90"], nvcc: "13.0", built_at: "2026-11-29T14:00:00Z", dir: "/opt/appliance/lib/llama-cuda-source/bins/linux-x64-cuda" }, null).detail).toBe(
      "built on this host for sm_90 with nvcc 13.0 (2026-11-29, /opt/appliance/lib/llama-cuda-source/bins/linux-x64-cuda); the CUDA decode test tries it first",
    );
    expect(checkCudaSourceBuild(gpu, null, { path: "/usr/local/cuda/bin/nvcc", version: "13.0" }).detail).toContain("./install.sh --cuda-build compiles llama.cpp's CUDA backend for this GPU");
    expect(checkCudaSourceBuild(gpu, null, null).detail).toStartWith("none; no nvcc here");
    expect(checkCudaSourceBuild(none, null, null)).toEqual({ name: "cuda source build", status: "ok", detail: "none (not needed: no NVIDIA GPU)" });
  });
});

describe("runDoctor", () => {
  const loaded = (raw: Record<string, unknown> = {}) => () => ({ config: config(raw), file: "/etc/appliance.toml" });

  test("a config that does not load fails, and the machine is still checked", async () => {
    const report = await runDoctor(() => {
      throw new ConfigError("config.toml: invalid configuration\n  server.port: Expected integer");
    }, fakeProbes());
    expect(report.ok).toBe(false);
    expect(report.checks.map((c) => [c.name, c.status])).toEqual([
      ["config", "fail"],
      ["gpus", "ok"],
      ["cuda runtime", "ok"],
      ["cuda source build", "ok"],
      ["vulkan", "ok"],
      ["open files", "ok"],
    ]);
    expect(report.checks[0]!.detail).toContain("server.port: Expected integer");
  });

  test("a healthy CPU-only machine passes every check, in order", async () => {
    const report = await runDoctor(loaded({ demo: true }), fakeProbes(), () => [{ id: "demo chat", kind: "chat" }]);
    expect(report.checks.map((c) => `${c.status} ${c.name}`)).toEqual([
      "ok config",
      "ok gpus",
      "ok cuda runtime",
      "ok cuda source build",
      "ok vulkan",
      "ok open files",
      "ok chat engine",
      "ok onnx engines",
      "ok image input",
      "ok chat decoding",
      "ok threads",
      "ok demo models",
      "ok memory plan",
      "ok store",
      "ok data dir",
      "ok disk space",
      "ok port",
    ]);
    expect(report.ok).toBe(true);
    expect(report.checks.find((c) => c.name === "chat engine")!.detail).toContain("1 chat model");
  });

  test("one failing check makes the report fail", async () => {
    const report = await runDoctor(loaded(), fakeProbes({ listen: async () => "EADDRINUSE" }));
    expect(report.ok).toBe(false);
    expect(report.checks.filter((c) => c.status === "fail").map((c) => c.name)).toEqual(["port"]);
  });
});
