import { afterAll, expect, test } from "bun:test";
import { existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, readlinkSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { installCudaLibs } from "../../src/ops/build/cuda-libs";
import { CUDA_DESTINATIONS } from "../../src/ops/build/cuda-libs-manifest";
import { shipCuda12Build } from "../../src/ops/build/executable";
import { nativeLibPlugin } from "../../src/ops/build/plugins";
import { CUDA12_BINS, CUDA_BUILD_ENV, CUDA_SOURCE_BINS } from "../../src/3-engines/installed";
import { tempDir } from "../helpers/app";

// node-llama-cpp's CUDA 12 build, for GPUs whose driver cannot compile the CUDA 13 build's PTX (an
// H100 on driver 580.159 aborted at the first kernel): the executable assembles it from the CUDA
// package's files and the -ext package's fallback libggml-cuda.so, its CUDA package offers it when
// the runtime asks (APPLIANCE_LLAMA_CUDA_BUILD=12), and install.sh --cuda puts its runtime beside it.

const root = tempDir("appliance-cuda12-");
afterAll(() => rmSync(root, { recursive: true, force: true }));
const HOST = `${process.platform}-${process.arch}`;

/** A lib/ with the CUDA package's files and the -ext fallback, as the build ships them. */
function fakeLib(name: string): string {
  const lib = join(root, name);
  const primary = join(lib, "@node-llama-cpp", `${HOST}-cuda`, "bins", `${HOST}-cuda`);
  const fallback = join(lib, "@node-llama-cpp", `${HOST}-cuda-ext`, "bins", `${HOST}-cuda`, "fallback");
  mkdirSync(primary, { recursive: true });
  mkdirSync(fallback, { recursive: true });
  for (const f of ["llama-addon.node", "libggml-cuda.so", "libggml-base.so", "libllama.cuda.v0.5.0.so", "_nlcBuildMetadata.json"]) writeFileSync(join(primary, f), `cuda13 ${f}`);
  writeFileSync(join(fallback, "libggml-cuda.so"), "cuda12 libggml-cuda.so");
  return lib;
}

test("the CUDA 12 build is the CUDA package's files with the fallback's libggml-cuda.so, all relative links", () => {
  const lib = fakeLib("lib-a");
  shipCuda12Build(lib, () => {});
  const dir = join(lib, CUDA12_BINS, `${HOST}-cuda`);
  expect(readdirSync(dir).sort()).toEqual(["_nlcBuildMetadata.json", "libggml-base.so", "libggml-cuda.so", "libllama.cuda.v0.5.0.so", "llama-addon.node"]);
  for (const f of readdirSync(dir)) {
    expect(lstatSync(join(dir, f)).isSymbolicLink()).toBe(true);
    expect(readlinkSync(join(dir, f))).not.toStartWith("/"); // survives install.sh's copy to another prefix
  }
  expect(readFileSync(join(dir, "libggml-cuda.so"), "utf8")).toBe("cuda12 libggml-cuda.so");
  expect(readFileSync(join(dir, "llama-addon.node"), "utf8")).toBe("cuda13 llama-addon.node");
  // the installer's destination for the CUDA 12 runtime is this folder
  expect(realpathSync(join(lib, CUDA_DESTINATIONS.llama12))).toBe(realpathSync(dir));
});

test("without the -ext package (or without CUDA), nothing is assembled", () => {
  const lib = fakeLib("lib-b");
  rmSync(join(lib, "@node-llama-cpp", `${HOST}-cuda-ext`), { recursive: true });
  shipCuda12Build(lib, () => {});
  expect(existsSync(join(lib, CUDA12_BINS))).toBe(false);
});

test("install.sh --cuda links the CUDA 12 runtime beside the assembled build and beside the fallback's own file", async () => {
  const lib = fakeLib("lib-c");
  shipCuda12Build(lib, () => {});
  const top = "cuda_cudart-linux-x86_64-12.8.90-archive";
  const src = join(root, "src", top, "lib");
  mkdirSync(src, { recursive: true });
  writeFileSync(join(src, "libcudart.so.12.8.90"), "cudart12");
  Bun.spawnSync(["ln", "-s", "libcudart.so.12.8.90", join(src, "libcudart.so.12")]);
  const archives = join(root, "archives");
  mkdirSync(archives, { recursive: true });
  const file = `${top}.tar.xz`;
  expect(Bun.spawnSync(["tar", "-cJf", join(archives, file), "-C", join(root, "src"), top]).exitCode).toBe(0);
  const sha256 = new Bun.CryptoHasher("sha256").update(readFileSync(join(archives, file))).digest("hex");
  const manifest = { id: "t", archives: [{ name: "cudart 12", file, url: "https://example.invalid/x", sha256, source: "test", root: top, take: ["lib/libcudart.so.12*"], provides: ["libcudart.so.12"], to: ["llama12" as const, "llamaFallback" as const] }] };
  await installCudaLibs({ lib, from: archives, manifest, log: () => {} });
  for (const d of [CUDA_DESTINATIONS.llama12, CUDA_DESTINATIONS.llamaFallback]) expect(readFileSync(join(lib, d, "libcudart.so.12"), "utf8")).toBe("cudart12");
  expect(existsSync(join(lib, CUDA_DESTINATIONS.llama, "libcudart.so.12"))).toBe(false); // the CUDA 13 build is left alone
  // the assembled folder's other files are untouched links
  expect(readFileSync(join(lib, CUDA_DESTINATIONS.llama12, "libggml-cuda.so"), "utf8")).toBe("cuda12 libggml-cuda.so");
});

test("the executable's CUDA package offers the CUDA 13 build, or the CUDA 12 one or the one built on this host when the runtime asks", async () => {
  const nm = resolve(import.meta.dir, "..", "..", "node_modules");
  if (!existsSync(join(nm, "@node-llama-cpp", `${HOST}-cuda`, "package.json"))) throw new Error(`@node-llama-cpp/${HOST}-cuda is not installed`);
  // the entry sits in the checkout so that it resolves the package from node_modules
  mkdirSync(resolve(nm, "..", ".cache"), { recursive: true });
  const entry = resolve(nm, "..", ".cache", `cuda12-entry-${process.pid}.ts`);
  writeFileSync(entry, `import { getBinsDir } from "@node-llama-cpp/${HOST}-cuda";\nconsole.log(JSON.stringify(getBinsDir()));\n`);
  const out = join(root, "bundle");
  const r = await Bun.build({ entrypoints: [entry], outdir: out, target: "bun", plugins: [nativeLibPlugin(nm)] } as Parameters<typeof Bun.build>[0]).finally(() => rmSync(entry, { force: true }));
  expect(r.success).toBe(true);
  const bundle = join(out, readdirSync(out).find((f) => f.endsWith(".js"))!);
  const version = JSON.parse(readFileSync(join(nm, "node-llama-cpp", "package.json"), "utf8")).version;
  const bins = (extra: Record<string, string>) => JSON.parse(Bun.spawnSync([process.execPath, bundle], { env: { ...process.env, APPLIANCE_LIB_DIR: "/opt/appliance/lib", [CUDA_BUILD_ENV]: "", ...extra } }).stdout.toString());
  expect(bins({})).toEqual({ binsDir: `/opt/appliance/lib/@node-llama-cpp/${HOST}-cuda/bins`, packageVersion: version });
  expect(bins({ [CUDA_BUILD_ENV]: "12" })).toEqual({ binsDir: `/opt/appliance/lib/${CUDA12_BINS}`, packageVersion: version });
  expect(bins({ [CUDA_BUILD_ENV]: "source" })).toEqual({ binsDir: `/opt/appliance/lib/${CUDA_SOURCE_BINS}`, packageVersion: version });
});
