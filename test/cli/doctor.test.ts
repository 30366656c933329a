import { afterAll, expect, test } from "bun:test";
import { freePort } from "../helpers/ports";
import { existsSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { tempDir } from "../helpers/app";
import { cli } from "../helpers/cli";

const dir = tempDir();
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const cpuOnly = !existsSync("/dev/nvidiactl") && !existsSync("/proc/driver/nvidia/version");

function config(name: string, toml: string): string {
  const file = join(dir, name);
  writeFileSync(file, toml);
  return file;
}

test("a config whose model file is missing exits 1 and prints the fix", async () => {
  const file = config("missing.toml", `[[models]]\nid = "ghost"\nname = "Ghost"\nkind = "chat"\nfiles = { model = "ghost.gguf" }\nmax_context = 2048\n`);
  const env = { APPLIANCE_PORT: String(await freePort()) };
  const r = cli(dir, ["-c", file, "doctor"], env);
  expect(r.code).toBe(1);
  expect(r.stdout).toContain(`✗ model ghost`);
  expect(r.stdout).toContain(`files.model not found: ${join(dir, "ghost.gguf")}`);
  expect(r.stdout).toContain("    → appliance models pull ghost, or fix models[0].files.model in the config");
  expect(r.stdout).toMatch(/1 problem to fix/);
});

test("the demo config on this machine exits 0 and says what the engines will use", async () => {
  const file = config("demo.toml", "demo = true\n");
  const data = join(dir, "fresh-data");
  const r = cli(dir, ["-c", file, "-d", data, "doctor"], { APPLIANCE_PORT: String(await freePort()) });
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  for (const name of ["config", "gpus", "cuda runtime", "vulkan", "chat engine", "onnx engines", "image input", "threads", "demo models", "memory plan", "data dir", "disk space", "port"]) {
    expect(r.stdout).toMatch(new RegExp(`^[✓!] ${name} `, "m"));
  }
  if (cpuOnly) {
    expect(r.stdout).toMatch(/^✓ gpus +CPU only/m);
    // and no Vulkan GPU either: Mesa's llvmpipe (installed for the tests) is a CPU, never chosen
    expect(r.stdout).toMatch(/^✓ chat engine +llama\.cpp → cpu \(no NVIDIA device; Vulkan not usable: [^)]+\)+; 1 chat model$/m);
  }
  expect(r.stdout).toContain(`${data} (created at first start)`);
  // Looking is all it does: the data dir is not created.
  expect(existsSync(data)).toBe(false);
});

test("no config at all exits 0; a taken port exits 1", async () => {
  const port = await freePort();
  const ok = cli(dir, ["doctor", "--json"], { APPLIANCE_PORT: String(port) });
  expect(ok.code).toBe(0);
  expect(ok.json().checks.find((c: { name: string }) => c.name === "models").detail).toContain("none configured");

  const held = createServer();
  await new Promise<void>((r) => held.listen(port, "127.0.0.1", () => r()));
  try {
    const taken = cli(dir, ["doctor"], { APPLIANCE_PORT: String(port) });
    expect(taken.code).toBe(1);
    expect(taken.stdout).toContain(`✗ port`);
    expect(taken.stdout).toContain(`another process listens on ${port}`);
  } finally {
    await new Promise((r) => held.close(r));
  }
});

test("the memory plan names each model's device, context × slots and MB, and fails for a model that cannot fit", async () => {
  const { ensureChatModel } = await import("../../models/cache");
  const model = await ensureChatModel("chat");
  const file = config(
    "plan.toml",
    `[engines]\ndevice = "cpu"\nthreads = 1\ncpu_memory_mb = 40\n\n` +
      `[[models]]\nid = "small"\nname = "Small"\nkind = "chat"\nfiles = { model = ${JSON.stringify(model)} }\nmax_context = 2048\n\n` +
      `[[models]]\nid = "wide"\nname = "Wide"\nkind = "chat"\nfiles = { model = ${JSON.stringify(model)} }\nmax_context = 8192\nslots = 64\n`,
  );
  const r = cli(dir, ["-c", file, "doctor"], { APPLIANCE_PORT: String(await freePort()) });
  expect(r.code).toBe(1);
  expect(r.stdout).toMatch(/^✗ memory plan +1 model of 2 cannot be loaded on this machine: wide$/m);
  expect(r.stdout).toMatch(/^ +small \(chat\): cpu, 2,048 tokens × 1 slot, \d+ MB RAM$/m);
  expect(r.stdout).toMatch(/^ +wide \(chat\): cannot be loaded here: "wide" needs [\d,]+ MB of RAM on the CPU .*: [\d,]+ MB missing$/m);
  expect(r.stdout).toMatch(/^ +RAM: [\d,]+ MB free of [\d,]+ MB, 40 MB allowed \(engines\.cpu_memory_mb\)$/m);
}, 60_000);
