import { afterAll, expect, test } from "bun:test";
import { existsSync, lstatSync, mkdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { archsFromComputeCaps, autoBuildDecision, builtFrom, cmakeConfigure, findCublas, installSourceBuild, ninjaProgress, nvccVersionOf, parseArchs, sourceBuildInputs } from "../../src/ops/build/cuda-source";
import { CUDA12_BINS, CUDA_SOURCE_BINS } from "../../src/3-engines/installed";
import { tempDir } from "../helpers/app";

// The CUDA source build's pieces that need no compiler run (issue 49): architectures from
// nvidia-smi and --cuda-arch, nvcc's version, ninja's progress, the CMake line that makes a
// libggml-cuda.so fitting node-llama-cpp's prebuilt, where cuBLAS is looked for, and the folder
// the build is installed as. The compile itself: cuda-source-build.test.ts (test/gpu).

const root = tempDir("appliance-cuda-source-");
afterAll(() => rmSync(root, { recursive: true, force: true }));

test("architectures come from nvidia-smi's compute capabilities, once each, or from --cuda-arch in its usual spellings", () => {
  expect(archsFromComputeCaps("9.0\n8.6\n9.0\n")).toEqual(["90", "86"]);
  expect(archsFromComputeCaps("No devices were found\n")).toEqual([]);
  expect(parseArchs("90")).toEqual(["90"]);
  expect(parseArchs("90,86")).toEqual(["90", "86"]);
  expect(parseArchs("sm_90 sm_89")).toEqual(["90", "89"]);
  expect(parseArchs("9.0")).toEqual(["90"]);
  expect(parseArchs("120a")).toEqual(["120a"]);
  expect(parseArchs("hopper")).toBeNull();
  expect(parseArchs("")).toBeNull();
});

test("nvcc's version and ninja's progress are read from their output", () => {
  expect(nvccVersionOf("nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\n")).toBe("13.0");
  expect(nvccVersionOf("something else")).toBeNull();
  expect(ninjaProgress("[12/140] Building CUDA object ggml/src/ggml-cuda/CMakeFiles/ggml-cuda.dir/mmq.cu.o")).toEqual({ done: 12, total: 140 });
  expect(ninjaProgress("FAILED: x.o")).toBeNull();
});

test("the CMake line builds a dynamic ggml CUDA backend as node-llama-cpp's prebuilt is made, for the chosen architectures, against the cuBLAS found", () => {
  const line = cmakeConfigure({
    src: "/s",
    build: "/b",
    archs: ["90", "86"],
    toolkit: { nvcc: "/cuda/bin/nvcc", version: "13.0", root: "/cuda" },
    cublas: { include: "/lib/cuda/include", library: "/lib/cuda/libcublas.so.13" },
    driver: "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
    ccache: true,
  });
  for (const want of [
    "-DGGML_BACKEND_DL=ON",
    "-DGGML_CUDA=ON",
    "-DBUILD_SHARED_LIBS=ON",
    "-DCMAKE_CUDA_ARCHITECTURES=90;86",
    "-DCMAKE_CUDA_COMPILER=/cuda/bin/nvcc",
    "-DCUDA_cublas_LIBRARY=/lib/cuda/libcublas.so.13",
    "-DCUDA_cuda_driver_LIBRARY=/usr/lib/x86_64-linux-gnu/libcuda.so.1",
    "-DCMAKE_CUDA_FLAGS=-I/lib/cuda/include",
    "-DCMAKE_PLATFORM_NO_VERSIONED_SONAME=ON",
    "-DCMAKE_INSTALL_RPATH=$ORIGIN",
    "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
    "-DGGML_CCACHE=ON",
  ])
    expect(line).toContain(want);
  expect(line.slice(0, 7)).toEqual(["cmake", "-S", "/s", "-B", "/b", "-G", "Ninja"]);
});

test("cuBLAS is found in the toolkit, or in lib/cuda where ./install.sh --cuda put NVIDIA's (headers in include/, libraries beside)", () => {
  const toolkit = { nvcc: "/x/bin/nvcc", version: "13.0", root: join(root, "toolkit") };
  mkdirSync(join(toolkit.root, "include"), { recursive: true });
  expect(findCublas(toolkit)).toBeNull();
  const cuda = join(root, "lib", "cuda");
  mkdirSync(join(cuda, "include"), { recursive: true });
  writeFileSync(join(cuda, "include", "cublas_v2.h"), "");
  writeFileSync(join(cuda, "libcublas.so.13"), "");
  writeFileSync(join(cuda, "libcublas.so.13.2.0.9"), "");
  expect(findCublas(toolkit, [cuda])).toEqual({ include: join(cuda, "include"), library: join(cuda, "libcublas.so.13") });
  // The toolkit's own comes first.
  writeFileSync(join(toolkit.root, "include", "cublas_v2.h"), "");
  mkdirSync(join(toolkit.root, "lib64"), { recursive: true });
  writeFileSync(join(toolkit.root, "lib64", "libcublas.so"), "");
  expect(findCublas(toolkit, [cuda])).toEqual({ include: join(toolkit.root, "include"), library: join(toolkit.root, "lib64", "libcublas.so") });
});

test("what a host lacks for the build is named with how to get it", () => {
  const none = { env: { PATH: join(root, "no-bin") }, usual: [] };
  expect(sourceBuildInputs({ lib: root, archs: "90", search: none })).toEqual({ ok: false, missing: expect.stringContaining("nvcc (NVIDIA's CUDA toolkit) was not found") });
  // A named nvcc that does not run is no nvcc either.
  writeFileSync(join(root, "fake-nvcc"), "#!/bin/sh\nexit 1\n", { mode: 0o755 });
  expect(sourceBuildInputs({ lib: root, archs: "90", nvcc: join(root, "fake-nvcc"), search: none })).toMatchObject({ ok: false });
  // A toolkit (this one prints a version) with a wrong architecture, then without cuBLAS.
  const bin = join(root, "tk", "bin");
  mkdirSync(bin, { recursive: true });
  writeFileSync(join(bin, "nvcc"), "#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n", { mode: 0o755 });
  const tk = { env: { PATH: bin }, usual: [] };
  expect(sourceBuildInputs({ lib: root, archs: "hopper", search: tk })).toEqual({ ok: false, missing: expect.stringContaining("--cuda-arch hopper: not a GPU architecture") });
  expect(sourceBuildInputs({ lib: root, archs: "90", search: tk })).toEqual({ ok: false, missing: expect.stringContaining("./install.sh --cuda fetches NVIDIA's cuBLAS") });
});

test("the build is installed as a folder of its own: the prebuilt's files linked, the new libggml-cuda.so copied in", () => {
  const lib = join(root, "install-lib");
  const prebuilt = join(lib, "@node-llama-cpp", "linux-x64-cuda", "bins", "linux-x64-cuda");
  mkdirSync(prebuilt, { recursive: true });
  for (const f of ["libggml-base.so", "libggml-cuda.so", "libllama.cuda.v0.5.0.so", "llama-addon.node"]) writeFileSync(join(prebuilt, f), `prebuilt ${f}`);
  const built = join(root, "libggml-cuda.so");
  writeFileSync(built, "built here");
  const dir = installSourceBuild(lib, prebuilt, built);
  expect(dir).toBe(join(lib, CUDA_SOURCE_BINS, "linux-x64-cuda"));
  expect(readFileSync(join(dir, "libggml-cuda.so"), "utf8")).toBe("built here");
  expect(lstatSync(join(dir, "libggml-cuda.so")).isSymbolicLink()).toBe(false);
  for (const f of ["libggml-base.so", "libllama.cuda.v0.5.0.so", "llama-addon.node"]) {
    expect(lstatSync(join(dir, f)).isSymbolicLink()).toBe(true);
    expect(readlinkSync(join(dir, f))).not.toStartWith("/"); // relative: the install folder may move
    expect(readFileSync(join(dir, f), "utf8")).toBe(`prebuilt ${f}`);
  }
  // A second install replaces the first.
  writeFileSync(built, "built again");
  installSourceBuild(lib, prebuilt, built);
  expect(readFileSync(join(dir, "libggml-cuda.so"), "utf8")).toBe("built again");
  expect(existsSync(join(prebuilt, "libggml-cuda.so"))).toBe(true); // the prebuilt is untouched
});

test("install.sh's own rule: it builds only with a GPU, nvcc, and no prebuilt build that decodes, probing them in the runtime's order", async () => {
  const toolkit = { nvcc: "/usr/local/cuda-13.0/bin/nvcc", version: "13.0", root: "/usr/local/cuda-13.0" };
  const asked: string[] = [];
  const probe = (ok: string | null) => async (b: "13" | "12") => (asked.push(b), b === ok ? null : "a CUDA decode test failed (exit 134): CUDA error: the provided PTX was compiled with an unsupported toolchain");
  expect(await autoBuildDecision({ gpus: [], toolkit, prebuilt: ["13"], decodes: probe(null) })).toEqual({ build: false, why: "nvidia-smi lists no GPU here" });
  expect((await autoBuildDecision({ gpus: ["90"], toolkit: null, prebuilt: ["13"], decodes: probe(null) })).build).toBe(false);
  expect(asked).toEqual([]); // nothing probed without a GPU and nvcc
  expect(await autoBuildDecision({ gpus: ["90"], toolkit, prebuilt: ["13", "12"], decodes: probe("13") })).toEqual({ build: false, why: "node-llama-cpp's CUDA 13 build decodes on this GPU" });
  expect(asked.splice(0)).toEqual(["13"]);
  expect((await autoBuildDecision({ gpus: ["90"], toolkit, prebuilt: ["13", "12"], decodes: probe("12") })).why).toBe("node-llama-cpp's CUDA 12 build decodes on this GPU");
  expect(asked.splice(0)).toEqual(["13", "12"]);
  const build = await autoBuildDecision({ gpus: ["90"], toolkit, prebuilt: ["13", "12"], decodes: probe(null) });
  expect(build.build).toBe(true);
  expect(build.why).toContain("CUDA 13: a CUDA decode test failed (exit 134): CUDA error: the provided PTX");
  expect(build.why).toContain("nvcc 13.0 is here");
});

test("./install.sh's call, --auto with the new executable: probes it, says what it decides and why (--check builds nothing)", () => {
  // a host with an H200 (nvidia-smi), nvcc 13.0, and an executable whose probe passes only for the build named in its environment
  const host = join(root, "auto-host");
  const bin = join(host, "bin");
  mkdirSync(bin, { recursive: true });
  const script = (name: string, body: string) => {
    writeFileSync(join(bin, name), `#!/bin/sh\n${body}\n`, { mode: 0o755 });
    return join(bin, name);
  };
  script("nvidia-smi", `case "$*" in *compute_cap*) echo 9.0 ;; *) echo "GPU 0: NVIDIA H200 (UUID: GPU-0)" ;; esac`);
  const nvcc = script("nvcc", `echo "Cuda compilation tools, release 13.0, V13.0.88"`);
  const appliance = script("appliance", `[ "$APPLIANCE_LLAMA_CUDA_BUILD" = "$DECODES_ON" ] && { echo "cuda-probe: ok"; exit 0; }; echo "CUDA error: the provided PTX was compiled with an unsupported toolchain" >&2; exit 134`);
  const lib = join(host, "lib");
  mkdirSync(join(lib, CUDA12_BINS), { recursive: true });
  const run = (decodesOn: string) => {
    const r = Bun.spawnSync([process.execPath, join(import.meta.dir, "..", "..", "src", "ops", "build", "cuda-source.ts"), "--lib", lib, "--auto", appliance, "--nvcc", nvcc, "--check"], {
      env: { ...process.env, PATH: `${bin}:${process.env.PATH}`, DECODES_ON: decodesOn },
      stdout: "pipe",
      stderr: "pipe",
    });
    expect(r.exitCode, r.stderr.toString()).toBe(0);
    return r.stdout.toString().trim();
  };
  expect(run("")).toBe("cuda-build: not building: node-llama-cpp's CUDA 13 build decodes on this GPU"); // 13 is probed with the variable unset
  expect(run("12")).toBe("cuda-build: not building: node-llama-cpp's CUDA 12 build decodes on this GPU");
  const none = run("source");
  expect(none).toStartWith("cuda-build: building: no prebuilt CUDA build decodes on this GPU (CUDA 13: a CUDA decode test failed (exit 134): CUDA error: the provided PTX");
  expect(none).toContain("CUDA 12: ");
  expect(none).toEndWith("nvcc 13.0 is here");
});

test("a build tree remembers the source folder it was configured from (a tree from another one is started afresh)", () => {
  const build = join(root, "build-90");
  expect(builtFrom(build)).toBeNull();
  mkdirSync(build, { recursive: true });
  writeFileSync(join(build, "CMakeCache.txt"), "CMAKE_BUILD_TYPE:STRING=Release\nCMAKE_HOME_DIRECTORY:INTERNAL=/home/u/.cache/appliance/cuda-build/v0.5.0/llama.cpp\n");
  expect(builtFrom(build)).toBe("/home/u/.cache/appliance/cuda-build/v0.5.0/llama.cpp");
});
