import { expect, test } from "bun:test";
import { existsSync, lstatSync, mkdirSync, rmSync, symlinkSync } from "node:fs";
import { join, resolve } from "node:path";
import { buildCudaFromSource, findCublas, findCudaDriver, findNvcc } from "../../src/ops/build/cuda-source";
import { CUDA_SOURCE_BINS } from "../../src/3-engines/installed";
import { makeCudaStubs, neededFromCuda, STUB_INCLUDE } from "./cuda-stubs";

// Issue 49: llama.cpp's CUDA backend compiles with this host's nvcc for one architecture (sm_90),
// links, is installed as a build of its own beside node-llama-cpp's prebuilt, and loads. Skipped
// only where nvcc is absent. Where the toolkit has no cuBLAS and there is no driver (this
// project's build machines), it compiles against test/gpu/cuda-stubs (cuBLAS's declarations) and
// links and loads against stub libraries made here (cuda-stubs.ts): everything but running a kernel.
//
// Slow (the whole of ggml's CUDA kernels on 2 cores): not in the default suite. Run it with
//   bun test ./test/gpu/cuda-source-build.slow.ts
// The build tree stays in .cache/cuda-source-build: a second run compiles nothing unchanged.

const ROOT = resolve(import.meta.dir, "..", "..");
const toolkit = findNvcc();
const PREBUILT = join(ROOT, "node_modules", "@node-llama-cpp", "linux-x64-cuda", "bins", "linux-x64-cuda");

test.skipIf(!toolkit)(
  "the CUDA backend compiles here for sm_90 from node-llama-cpp's llama.cpp source, links, is installed as its own build, and loads",
  async () => {
    const cache = join(ROOT, ".cache", "cuda-source-build");
    const stubs = join(cache, "stubs");
    const empty = makeCudaStubs(join(stubs, "link"));
    const realCublas = findCublas(toolkit!);
    const realDriver = findCudaDriver(toolkit!);
    const cublas = realCublas ?? { include: STUB_INCLUDE, library: empty.cublas };
    const driver = realDriver ?? empty.cuda;
    // The empty stubs define nothing, so a linker that drops unused libraries (--as-needed) would drop them: not here.
    const cmakeExtra = realCublas && realDriver ? [] : ["-DCMAKE_SHARED_LINKER_FLAGS=-Wl,--no-as-needed", "-DCMAKE_MODULE_LINKER_FLAGS=-Wl,--no-as-needed"];

    // The install's lib/: node-llama-cpp's CUDA prebuilt where the executable keeps it.
    const lib = join(cache, "lib");
    rmSync(lib, { recursive: true, force: true });
    mkdirSync(join(lib, "@node-llama-cpp", "linux-x64-cuda", "bins"), { recursive: true });
    symlinkSync(PREBUILT, join(lib, "@node-llama-cpp", "linux-x64-cuda", "bins", "linux-x64-cuda"));

    const lines: string[] = [];
    const made = await buildCudaFromSource({
      lib,
      archs: ["90"],
      toolkit: toolkit!,
      cublas,
      driver,
      llamaDir: join(ROOT, "node_modules", "node-llama-cpp", "llama"),
      workDir: join(cache, "work"),
      cmakeExtra,
      jobs: navigator.hardwareConcurrency,
      log: (l) => (lines.push(l), console.log(l)),
    });
    console.log(`cuda source build: ${made.seconds} s for sm_90 (nvcc ${made.nvcc}, llama.cpp ${made.llamaCpp})`);
    expect(lines.some((l) => /^cuda-build: \d+\/\d+ \(\d+%\)/.test(l))).toBe(true); // progress was shown

    // Linked as node-llama-cpp's own libggml-cuda.so is: against its libggml-base.so, the CUDA 13 runtime, cuBLAS and the driver, found beside it.
    const dyn = Bun.spawnSync(["readelf", "-d", made.library], { stdout: "pipe" }).stdout.toString();
    for (const lib of ["libggml-base.so", "libcudart.so.13", "libcublas.so.13", "libcuda.so.1"]) expect(dyn).toContain(`Shared library: [${lib}]`);
    expect(dyn).toContain("Library runpath: [$ORIGIN]"); // nothing of this host's folders
    // Its kernels are SASS for sm_90.
    const cuobjdump = join(toolkit!.root, "bin", "cuobjdump");
    if (existsSync(cuobjdump)) expect(Bun.spawnSync([cuobjdump, "--list-elf", made.library], { stdout: "pipe" }).stdout.toString()).toContain("sm_90");

    // Installed as a build of its own: the prebuilt's files linked, this library in place of its own.
    expect(made.dir).toBe(join(lib, CUDA_SOURCE_BINS, "linux-x64-cuda"));
    expect(lstatSync(join(made.dir, "libggml-base.so")).isSymbolicLink()).toBe(true);
    expect(lstatSync(join(made.dir, "libggml-cuda.so")).isSymbolicLink()).toBe(false);

    // It loads as ggml loads a backend (RTLD_NOW: every symbol resolved), its entry points there.
    const full = makeCudaStubs(join(stubs, "load"), neededFromCuda(made.library));
    const libPath = [join(stubs, "load"), join(toolkit!.root, "lib64"), made.dir].join(":");
    // In a child (the loader's search path is read at start): libc's dlopen with RTLD_NOW, as ggml's backend loader opens it, then its entry point.
    const script = [
      `const { dlopenAll, RTLD_NOW } = require(${JSON.stringify(join(ROOT, "src", "3-engines", "dlopen.ts"))});`,
      `const failed = dlopenAll([${JSON.stringify(made.library)}], RTLD_NOW);`,
      `if (failed.length) { console.log(failed[0].error); process.exit(1); }`,
      `const l = require("bun:ffi").dlopen(${JSON.stringify(made.library)}, { ggml_backend_init: { returns: "ptr" } });`,
      `console.log("loaded", typeof l.symbols.ggml_backend_init);`,
    ].join("\n");
    const load = Bun.spawnSync([process.execPath, "-e", script], { stdout: "pipe", stderr: "pipe", env: { ...process.env, LD_LIBRARY_PATH: libPath } });
    expect({ code: load.exitCode, out: load.stdout.toString().trim(), err: load.stderr.toString().trim().slice(-500) }).toEqual({ code: 0, out: "loaded function", err: "" });
    // …and not without the functions it takes from cuBLAS and the driver: the load above resolved every one.
    const bare = Bun.spawnSync([process.execPath, "-e", script], { stdout: "pipe", stderr: "pipe", env: { ...process.env, LD_LIBRARY_PATH: [join(stubs, "link"), join(toolkit!.root, "lib64"), made.dir].join(":") } });
    expect(bare.exitCode).toBe(1);
    expect(bare.stdout.toString()).toContain("undefined symbol: cu");
    expect(full.cublas).toEndWith("libcublas.so.13");
  },
  4 * 3_600_000,
);
