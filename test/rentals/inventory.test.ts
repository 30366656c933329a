import { describe, expect, test } from "bun:test";
import { Value } from "@sinclair/typebox/value";
import { ConfigError } from "../../src/lib/config";
import {
  buildInventory,
  type CommandRunner,
  discoverGpus,
  type DiscoveredGpu,
  GpuEntry,
  isRentable,
  NO_COMPUTE_CAP,
  nodeIdFor,
  parseNvidiaSmi,
  type RentalNodeConfig,
  toGpuEntry,
  uuidV5,
  whyNotRentable,
} from "../../src/2-services/rentals/inventory";

// What nvidia-smi prints for `--query-gpu=uuid,name,memory.total,compute_cap,index
// --format=csv,noheader,nounits` (and the failures operators meet), byte for byte.
const UUID_A = "GPU-5f1c2b1e-9d4a-4c3e-8f2a-0a1b2c3d4e5f";
const UUID_B = "GPU-8fe3a97d-51f6-a669-0d80-b4530b81b816";
const TWO_GPUS = `${UUID_A}, NVIDIA GeForce RTX 4090, 24564, 8.9, 0\n${UUID_B}, NVIDIA H100 80GB HBM3, 81559, 9.0, 1\n`;
const DRIVER_MISMATCH = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 550.120\n";
const NO_DRIVER =
  "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n\n";
const CC_REJECTED = 'Field "compute_cap" is not a valid field to query.\n\n';

const V5 = /^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** A runner that answers each query from a table keyed by its --query-gpu fields, recording calls. */
function fakeRunner(answers: Record<string, { code: number; stdout: string; stderr?: string }>) {
  const calls: string[][] = [];
  const run: CommandRunner = async (cmd) => {
    calls.push(cmd);
    const fields = cmd.find((a) => a.startsWith("--query-gpu="))!.slice("--query-gpu=".length);
    const answer = answers[fields];
    if (!answer) throw new Error(`unexpected query ${fields}`);
    return { stderr: "", ...answer };
  };
  return { run, calls };
}

describe("parseNvidiaSmi", () => {
  test("two GPUs parse into uuid, name, memory, compute capability and index", () => {
    expect(parseNvidiaSmi(TWO_GPUS)).toEqual({
      gpus: [
        { uuid: UUID_A, name: "NVIDIA GeForce RTX 4090", vram_mb: 24564, compute_cap: 8.9, index: 0 },
        { uuid: UUID_B, name: "NVIDIA H100 80GB HBM3", vram_mb: 81559, compute_cap: 9, index: 1 },
      ],
      problem: null,
    });
  });

  test("CRLF line endings and a missing final newline change nothing", () => {
    expect(parseNvidiaSmi(TWO_GPUS.trimEnd().replace(/\n/g, "\r\n"))).toEqual(parseNvidiaSmi(TWO_GPUS));
  });

  test("a comma inside the name is kept, since the uuid is first and the last three fields are numbers", () => {
    const { gpus, problem } = parseNvidiaSmi(`${UUID_A}, Tesla K80, rev 2, 11441, 3.7, 0\n`);
    expect(problem).toBeNull();
    expect(gpus[0]).toMatchObject({ name: "Tesla K80, rev 2", vram_mb: 11441, compute_cap: 3.7 });
  });

  const failures: { name: string; stdout: string; problem: RegExp }[] = [
    { name: "the driver/library mismatch", stdout: DRIVER_MISMATCH, problem: /^nvidia-smi: Failed to initialize NVML: Driver\/library version mismatch \(.*reboot/ },
    { name: "no driver loaded", stdout: NO_DRIVER, problem: /^nvidia-smi: NVIDIA-SMI has failed because it couldn't communicate/ },
    { name: "an old driver refusing compute_cap", stdout: CC_REJECTED, problem: /^nvidia-smi: Field "compute_cap" is not a valid field to query\.$/ },
    { name: "no devices", stdout: "No devices were found\n", problem: /^nvidia-smi: No devices were found$/ },
    { name: "empty output", stdout: "", problem: /^nvidia-smi listed no GPUs$/ },
  ];
  for (const f of failures) {
    test(`${f.name} gives no GPUs and a one-line problem`, () => {
      const { gpus, problem } = parseNvidiaSmi(f.stdout);
      expect(gpus).toEqual([]);
      expect(problem).toMatch(f.problem);
      expect(problem).not.toContain("\n");
    });
  }

  const badLines: { name: string; line: string; problem: string }[] = [
    { name: "[N/A] memory", line: `${UUID_B}, NVIDIA A100-SXM4-40GB, [N/A], 8.0, 1`, problem: `line 2: ${UUID_B}: memory.total is [N/A]; skipped` },
    { name: "[Not Supported] compute_cap", line: `${UUID_B}, NVIDIA A100-SXM4-40GB, 40960, [Not Supported], 1`, problem: "compute_cap is [Not Supported]" },
    { name: "non-numeric memory", line: `${UUID_B}, NVIDIA A100-SXM4-40GB, 40960 MiB, 8.0, 1`, problem: "memory.total is 40960 MiB" },
    { name: "zero memory", line: `${UUID_B}, NVIDIA A100-SXM4-40GB, 0, 8.0, 1`, problem: "memory.total is 0" },
    { name: "an [Unknown Error] name", line: `${UUID_B}, [Unknown Error], 40960, 8.0, 1`, problem: "name is [Unknown Error]" },
    { name: "too few fields", line: `${UUID_B}, NVIDIA A100-SXM4-40GB, 40960`, problem: "line 2: expected 5 fields (uuid, name, memory.total, compute_cap, index), got 3" },
    { name: "a uuid that is not one", line: "00000000:41:00.0, NVIDIA A100-SXM4-40GB, 40960, 8.0, 1", problem: 'uuid is "00000000:41:00.0", not a GPU UUID' },
    { name: "a lost GPU", line: "Unable to determine the device handle for GPU0000:41:00.0: Unknown Error", problem: "line 2: expected 5 fields" },
    { name: "a repeated uuid", line: `${UUID_A}, NVIDIA GeForce RTX 4090, 24564, 8.9, 1`, problem: `line 2: ${UUID_A} listed twice; skipped` },
  ];
  for (const b of badLines) {
    test(`${b.name} skips that GPU, keeps the good one and says why`, () => {
      const { gpus, problem } = parseNvidiaSmi(`${UUID_A}, NVIDIA GeForce RTX 4090, 24564, 8.9, 0\n${b.line}\n`);
      expect(gpus.map((g) => g.uuid)).toEqual([UUID_A]);
      expect(problem).toContain(b.problem);
      expect(problem).not.toContain("\n");
    });
  }

  test("several bad lines are summarised on one line", () => {
    const { gpus, problem } = parseNvidiaSmi(`${UUID_A}, X, [N/A], 8.9, 0\n${UUID_B}, Y, [N/A], 8.9, 1\nnonsense\n`);
    expect(gpus).toEqual([]);
    expect(problem).toBe(`line 1: ${UUID_A}: memory.total is [N/A]; skipped (and 2 more problems)`);
  });

  test("without compute_cap, four fields are expected and compute_cap is 0", () => {
    const { gpus, problem } = parseNvidiaSmi(`${UUID_A}, Tesla K80, 11441, 0\n`, false);
    expect(problem).toBeNull();
    expect(gpus).toEqual([{ uuid: UUID_A, name: "Tesla K80", vram_mb: 11441, compute_cap: 0, index: 0 }]);
  });
});

describe("discoverGpus", () => {
  test("asks nvidia-smi for uuid, name, memory, compute capability and index without units", async () => {
    const { run, calls } = fakeRunner({ "uuid,name,memory.total,compute_cap,index": { code: 0, stdout: TWO_GPUS } });
    const found = await discoverGpus(run);
    expect(calls).toEqual([["nvidia-smi", "--query-gpu=uuid,name,memory.total,compute_cap,index", "--format=csv,noheader,nounits"]]);
    expect(found.problem).toBeNull();
    expect(found.gpus).toHaveLength(2);
  });

  test("an old driver that refuses compute_cap is asked again without it", async () => {
    const { run, calls } = fakeRunner({
      "uuid,name,memory.total,compute_cap,index": { code: 2, stdout: CC_REJECTED },
      "uuid,name,memory.total,index": { code: 0, stdout: `${UUID_A}, Tesla K80, 11441, 0\n${UUID_B}, Tesla K80, 11441, 1\n` },
    });
    const found = await discoverGpus(run);
    expect(calls).toHaveLength(2);
    expect(found.problem).toBe(NO_COMPUTE_CAP);
    expect(found.problem).toBe("this driver cannot report compute_cap; set it in config");
    expect(found.gpus.map((g) => [g.uuid, g.compute_cap])).toEqual([[UUID_A, 0], [UUID_B, 0]]);
  });

  test("a problem in the second answer is reported after the compute_cap one", async () => {
    const { run } = fakeRunner({
      "uuid,name,memory.total,compute_cap,index": { code: 2, stdout: CC_REJECTED },
      "uuid,name,memory.total,index": { code: 0, stdout: `${UUID_A}, Tesla K80, [N/A], 0\n` },
    });
    expect((await discoverGpus(run)).problem).toBe(`${NO_COMPUTE_CAP}; line 1: ${UUID_A}: memory.total is [N/A]; skipped`);
  });

  test("the driver mismatch exits non-zero and yields no GPUs with its first line", async () => {
    const { run } = fakeRunner({ "uuid,name,memory.total,compute_cap,index": { code: 18, stdout: DRIVER_MISMATCH } });
    const found = await discoverGpus(run);
    expect(found.gpus).toEqual([]);
    expect(found.problem).toStartWith("nvidia-smi exited with 18: Failed to initialize NVML: Driver/library version mismatch");
    expect(found.problem).not.toContain("\n");
  });

  test("a non-zero exit yields no GPUs even when some lines look right", async () => {
    const { run } = fakeRunner({
      "uuid,name,memory.total,compute_cap,index": { code: 15, stdout: `${UUID_A}, NVIDIA GeForce RTX 4090, 24564, 8.9, 0\n`, stderr: "GPU is lost" },
    });
    expect(await discoverGpus(run)).toEqual({ gpus: [], problem: `nvidia-smi exited with 15: ${UUID_A}, NVIDIA GeForce RTX 4090, 24564, 8.9, 0` });
  });

  test("a non-zero exit with only stderr reports stderr's first line", async () => {
    const { run } = fakeRunner({ "uuid,name,memory.total,compute_cap,index": { code: 9, stdout: "", stderr: NO_DRIVER } });
    expect((await discoverGpus(run)).problem).toStartWith("nvidia-smi exited with 9: NVIDIA-SMI has failed because");
  });

  test("a host without nvidia-smi reports that no NVIDIA driver is installed", async () => {
    const run: CommandRunner = async () => {
      throw Object.assign(new Error('Executable not found in $PATH: "nvidia-smi"'), { code: "ENOENT" });
    };
    expect(await discoverGpus(run)).toEqual({ gpus: [], problem: "nvidia-smi not found: no NVIDIA driver on this host" });
  });

  test("a runner that fails otherwise is reported, not thrown", async () => {
    const run: CommandRunner = async () => {
      throw Object.assign(new Error("nvidia-smi did not finish within 5 s"), { code: "ETIMEDOUT" });
    };
    expect(await discoverGpus(run)).toEqual({ gpus: [], problem: "nvidia-smi could not run: nvidia-smi did not finish within 5 s" });
  });

  test("the default runner never throws, whatever this host has", async () => {
    const found = await discoverGpus();
    expect(Array.isArray(found.gpus)).toBe(true);
    if (!found.gpus.length) expect(found.problem).toBeString();
    if (!Bun.which("nvidia-smi")) expect(found.problem).toBe("nvidia-smi not found: no NVIDIA driver on this host");
  });
});

describe("node ids", () => {
  test("uuidV5 matches the RFC 4122 example for www.example.com in the DNS namespace", () => {
    expect(uuidV5("www.example.com", "6ba7b810-9dad-11d1-80b4-00c04fd430c8")).toBe("2ed6657d-e927-568b-95e1-2665a8aea6a2");
  });

  test("the same GPU uuid gives the same v5 node id, on every start and every host", () => {
    const id = nodeIdFor(UUID_A);
    expect(id).toMatch(V5);
    expect(id[14]).toBe("5"); // version nibble
    expect("89ab").toContain(id[19]!); // variant 10xx
    expect(nodeIdFor(UUID_A)).toBe(id);
    // Pinned (computed with Python's uuid.uuid5): a changed namespace would rename every node.
    expect(id).toBe("8a763cfe-762e-5d60-a776-6b17edada7f1");
  });

  test("different GPUs get different node ids", () => {
    expect(nodeIdFor(UUID_A)).not.toBe(nodeIdFor(UUID_B));
  });
});

describe("buildInventory", () => {
  const gpuA: DiscoveredGpu = { uuid: UUID_A, name: "NVIDIA GeForce RTX 4090", vram_mb: 24564, compute_cap: 8.9, index: 0 };
  const gpuB: DiscoveredGpu = { uuid: UUID_B, name: "NVIDIA H100 80GB HBM3", vram_mb: 81559, compute_cap: 9, index: 1 };
  const declaredA: RentalNodeConfig = {
    gpu_uuid: UUID_A,
    gpu: "RTX 4090",
    vram_mb: 24000,
    compute_cap: 8.9,
    country: "Germany",
    country_code: "DE",
    price_per_hour: 0.45,
    launcher: "docker",
  };
  const fullDefaults = { price_per_hour: 2.1, country: "Finland", country_code: "FI", launcher: "process" };

  test("a declared GPU that nvidia-smi also sees is one node, with the config's values", () => {
    const nodes = buildInventory({ declared: [declaredA], discovered: [gpuA], defaults: fullDefaults });
    expect(nodes).toEqual([
      {
        node_id: nodeIdFor(UUID_A),
        gpu: "RTX 4090",
        gpu_uuids: [UUID_A],
        vram_mb: 24000,
        compute_cap: 8.9,
        country: "Germany",
        country_code: "DE",
        price_per_hour: 0.45,
        launcher: "docker",
      },
    ]);
  });

  test("a hand-typed gpu_uuid in another case matches the discovered GPU and keeps its node id", () => {
    const nodes = buildInventory({ declared: [{ ...declaredA, gpu_uuid: UUID_A.toUpperCase() }], discovered: [gpuA], defaults: {} });
    expect(nodes).toHaveLength(1);
    expect(nodes[0]!.node_id).toBe(nodeIdFor(UUID_A));
    expect(nodes[0]!.gpu_uuids).toEqual([UUID_A]);
  });

  test("declared nodes come first in config order, then undeclared GPUs in index order", () => {
    const nodes = buildInventory({ declared: [declaredA], discovered: [gpuB, gpuA], defaults: fullDefaults });
    expect(nodes.map((n) => n.gpu_uuids[0])).toEqual([UUID_A, UUID_B]);
  });

  test("an undeclared GPU takes nvidia-smi's name and memory and the default price, country and launcher", () => {
    const [node] = buildInventory({ declared: [], discovered: [gpuB], defaults: fullDefaults });
    expect(node).toEqual({
      node_id: nodeIdFor(UUID_B),
      gpu: "NVIDIA H100 80GB HBM3",
      gpu_uuids: [UUID_B],
      vram_mb: 81559,
      compute_cap: 9,
      country: "Finland",
      country_code: "FI",
      price_per_hour: 2.1,
      launcher: "process",
    });
    expect(isRentable(node!)).toBe(true);
    expect(whyNotRentable(node!)).toBeNull();
  });

  test("an undeclared GPU without a default price is listed with price null and is not rentable", () => {
    const [node] = buildInventory({ declared: [], discovered: [gpuB], defaults: { country: "Finland", country_code: "FI", launcher: "process" } });
    expect(node!.price_per_hour).toBeNull();
    expect(isRentable(node!)).toBe(false);
    expect(whyNotRentable(node!)).toBe(`no price_per_hour: declare ${UUID_B} in rental_nodes`);
  });

  test("an undeclared GPU lacking a launcher or country stays unpriced even with a default price", () => {
    const [node] = buildInventory({ declared: [], discovered: [gpuB], defaults: { price_per_hour: 2.1 } });
    expect(node).toMatchObject({ price_per_hour: null, country: "", country_code: "", launcher: "" });
    expect(whyNotRentable(node!)).toBe(`no country, country_code, launcher: declare ${UUID_B} in rental_nodes`);
  });

  test("an undeclared GPU whose driver cannot report compute_cap stays unpriced", () => {
    const [node] = buildInventory({ declared: [], discovered: [{ ...gpuB, compute_cap: 0 }], defaults: fullDefaults });
    expect(node!.price_per_hour).toBeNull();
    expect(whyNotRentable(node!)).toBe(`no compute_cap: declare ${UUID_B} in rental_nodes`);
  });

  test("a declared node naming no gpu_uuid is listed but not rentable: a launcher could hand out no GPU, or all", () => {
    const { gpu_uuid: _, ...noUuid } = declaredA;
    const [node] = buildInventory({ declared: [noUuid], discovered: [], defaults: {} });
    expect(node).toMatchObject({ price_per_hour: 0.45, gpu_uuids: [] });
    expect(isRentable(node!)).toBe(false);
    expect(whyNotRentable(node!)).toContain("no gpu_uuid");
  });

  test("a declared GPU that nvidia-smi does not see is still listed as the config says", () => {
    const nodes = buildInventory({ declared: [declaredA], discovered: [], defaults: {} });
    expect(nodes).toHaveLength(1);
    expect(nodes[0]).toMatchObject({ node_id: nodeIdFor(UUID_A), price_per_hour: 0.45 });
  });

  test("declared nodes without gpu_uuid get ids that survive adding other nodes", () => {
    const { gpu_uuid: _, ...plain } = declaredA;
    const before = buildInventory({ declared: [plain, plain], discovered: [], defaults: {} });
    const other = { ...plain, gpu: "RTX 3090" };
    const after = buildInventory({ declared: [other, plain, { ...declaredA, gpu_uuid: UUID_B }, plain], discovered: [], defaults: {} });
    expect(before.map((n) => n.node_id)).toEqual([nodeIdFor("config:RTX 4090:DE:0"), nodeIdFor("config:RTX 4090:DE:1")]);
    expect([after[1]!.node_id, after[3]!.node_id]).toEqual(before.map((n) => n.node_id));
    expect(new Set(after.map((n) => n.node_id)).size).toBe(4);
    expect(after[1]!.gpu_uuids).toEqual([]);
  });

  test("a gpu_uuid declared twice is a config error naming both entries", () => {
    expect(() => buildInventory({ declared: [declaredA, { ...declaredA, price_per_hour: 1 }], discovered: [], defaults: {} })).toThrow(
      new ConfigError(`rental_nodes[1].gpu_uuid: "${UUID_A}" is also declared by rental_nodes[0]`),
    );
  });
});

describe("toGpuEntry", () => {
  test("a rentable node becomes the exact public entry", () => {
    const [node] = buildInventory({
      declared: [],
      discovered: [{ uuid: UUID_A, name: "NVIDIA GeForce RTX 4090", vram_mb: 24564, compute_cap: 8.9, index: 0 }],
      defaults: { price_per_hour: 0.39, country: "Germany", country_code: "DE", launcher: "docker" },
    });
    if (!node || !isRentable(node)) throw new Error("expected a rentable node");
    const entry = toGpuEntry(node);
    expect(entry).toEqual({
      node_id: nodeIdFor(UUID_A),
      gpu_model: "NVIDIA GeForce RTX 4090",
      vram_mb: 24564,
      compute_cap: 8.9,
      country: "Germany",
      country_code: "DE",
      price_per_hour: 0.39,
    });
    expect(Value.Check(GpuEntry, entry)).toBe(true);
    expect(Value.Check(GpuEntry, { ...entry, gpu_uuids: [UUID_A] })).toBe(false); // outbound shapes are exact
  });
});
