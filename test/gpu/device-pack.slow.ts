import { expect, test } from "bun:test";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { cmakeConfigure, findNvcc } from "../../src/ops/build/cuda-source";
import { devicePack, LIMIT_BYTES, packBytes } from "./device-pack";
import { makeCudaStubs, STUB_INCLUDE } from "./cuda-stubs";

// Issue 49: the device check travels to a GPU machine with no network and no Bun. The pack is made
// here, carried into a copy of the working tree as the device tool sends it (tracked and untracked
// files git does not ignore, plus the pack), and the check runs there with no Bun on the PATH and
// an empty HOME: it unpacks the pack, decodes on the CPU, builds llama-server from the packed
// llama.cpp source and runs the benches against it. The CUDA source build's CMake step then
// configures from that packed source (nvcc here, cuBLAS from the stubs: compiling it all is
// cuda-source-build.slow.ts's 37 minutes).
//
// Slow (the pack's first xz of Bun about 2 minutes, llama-server about 4 on 2 cores): not in the
// default suite. Run it with
//   bun test ./test/gpu/device-pack.slow.ts

const ROOT = resolve(import.meta.dir, "..", "..");

test("packed and carried to a copy of the tree with no Bun, the check unpacks it, decodes, builds llama-server from the packed source and benches against it", async () => {
  const manifest = await devicePack({ out: join(ROOT, ".cache", "device-pack"), vulkan: true, log: (l) => console.log(l) });
  expect(packBytes(manifest) + manifest.treeBytes).toBeLessThanOrEqual(LIMIT_BYTES);

  const room = mkdtempSync(join(tmpdir(), "device-room-"));
  const home = join(room, "..", `${room.split("/").pop()}-home`);
  mkdirSync(home, { recursive: true });
  try {
    const files = Bun.spawnSync(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], { cwd: ROOT }).stdout.toString().split("\0").filter(Boolean);
    for (const f of files) {
      if (!existsSync(join(ROOT, f))) continue; // deleted in the working tree
      mkdirSync(dirname(join(room, f)), { recursive: true });
      cpSync(join(ROOT, f), join(room, f), { dereference: false });
    }
    cpSync(join(ROOT, ".cache", "device-pack"), join(room, ".cache", "device-pack"), { recursive: true });
    expect(existsSync(join(room, "node_modules"))).toBe(false);

    const env = { PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", HOME: home, DEVICES: "cpu", DEVICE_CHECK_OUT: join(room, "table.md") };
    expect(Bun.spawnSync(["bash", "-c", "command -v bun || true"], { env }).stdout.toString().trim()).toBe(""); // no Bun but the pack's
    const check = Bun.spawnSync(["bash", "test/gpu/device-check.sh"], { cwd: room, env, stdout: "pipe", stderr: "pipe", timeout: 1_200_000 });
    const out = check.stdout.toString();
    console.log(out);
    expect(check.exitCode).toBe(0);
    expect(out).toContain("device-unpack: Bun ");

    const rows = readFileSync(join(room, "table.md"), "utf8").split("\n").filter((l) => l.startsWith("| ")).map((l) => l.split(" | ").map((c) => c.replace(/^\| |\s*\|$/g, "").trim()));
    const row = (check: string) => rows.find((r) => r[0]!.startsWith(check));
    expect(row("pack")?.[2]).toBe("unpacked");
    expect(row("decode: node-llama-cpp's CPU build")?.[2]).toBe("decodes");
    expect(row("llama-server build")?.[2]).toBe("ready");
    for (const n of [1, 8, 32]) expect(row(`vs llama-server, ${n} stream`)?.[2]).toMatch(/^\d+\.\d+× agg/);
    expect(row("fairness")?.[3]).toMatch(/ours p95 [\d.]+×/);
    expect(row("embeddings")?.[4]).toContain("left out of the pack");

    // the CUDA source build's CMake step, from the source the pack brought
    const toolkit = findNvcc();
    if (toolkit) {
      const src = join(room, "node_modules", ".appliance", "mtmd", `llama.cpp-${manifest.llamaCpp.tag}`);
      const stubs = makeCudaStubs(join(room, "cuda-stubs"));
      const configure = cmakeConfigure({ src, build: join(room, "cuda-build"), archs: ["90"], toolkit, cublas: { include: STUB_INCLUDE, library: stubs.cublas }, driver: stubs.cuda, ccache: false });
      const r = Bun.spawnSync(configure, { stdout: "pipe", stderr: "pipe" });
      expect(r.exitCode, r.stderr.toString().slice(-2000)).toBe(0);
      expect(existsSync(join(room, "cuda-build", "build.ninja"))).toBe(true);
      // every input of the 154 steps is there (ninja's dry run fails on a missing one)
      const dry = Bun.spawnSync(["ninja", "-C", join(room, "cuda-build"), "-n", "ggml-cuda"], { stdout: "pipe", stderr: "pipe" });
      expect(dry.exitCode, dry.stdout.toString().slice(-1000) + dry.stderr.toString()).toBe(0);
      expect(dry.stdout.toString()).toContain("Linking CUDA shared module bin/libggml-cuda.so");
    }
  } finally {
    rmSync(room, { recursive: true, force: true });
    rmSync(home, { recursive: true, force: true });
  }
}, 1_800_000);
