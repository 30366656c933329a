import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { droppable, entryPoints, forThisHost, LLAMA_SOURCE_PATHS, packageRoots, withPlatformPackages } from "../gpu/device-pack";

// The pack that carries what test/gpu/device-check.sh needs to a GPU machine with no network
// (test/gpu/device-pack.ts): which packages and files go. The whole path (pack, unpack into a copy of
// the checkout with no Bun on the PATH, decode, a test file) is test/gpu/device-pack.slow.ts.

test("the entry points are the check's scripts and every test file device-check.sh names", () => {
  const entries = entryPoints().map((p) => p.slice(join(import.meta.dir, "..", "..").length + 1));
  const script = readFileSync(join(import.meta.dir, "..", "gpu", "device-check.sh"), "utf8");
  for (const f of script.match(/test\/[\w/.-]+\.test\.ts/g)!) expect(entries).toContain(f);
  for (const f of ["test/gpu/probe.ts", "test/gpu/bench-step.ts", "test/gpu/metrics.ts", "test/gpu/cuda-lib.ts", "cli/main.ts", "src/ops/build/cuda-source.ts", "test/bench/llama-server-build.ts"]) expect(entries).toContain(f);
  expect(entries.some((e) => e.endsWith(".slow.ts") || e.endsWith("device-pack.ts"))).toBe(false);
});

test("package roots: scoped, plain and nested packages, each once", () => {
  expect(packageRoots([
    "/r/node_modules/openai/index.mjs",
    "/r/node_modules/openai/core/x.mjs",
    "/r/node_modules/@sinclair/typebox/build/index.mjs",
    "/r/node_modules/cross-spawn/node_modules/which/which.js",
    "/r/src/app.ts",
  ])).toEqual(["/r/node_modules/@sinclair/typebox", "/r/node_modules/cross-spawn/node_modules/which", "/r/node_modules/openai"]);
});

test("types, maps, docs, tests and TypeScript sources beside a build stay behind; code, JSON, native libraries and wasm go", () => {
  for (const f of ["index.d.ts", "core.d.mts", "a.js.map", "README.md", "docs/x.js", "test/a.js", "src/client.ts"]) expect(droppable(f)).toBe(true);
  for (const f of ["index.js", "index.mjs", "package.json", "bins/linux-x64/libllama.v0.5.0.so", "ort.wasm", "dist/index.js", "lib/main.ts"]) expect(droppable(f)).toBe(false);
});

test("platform packages: only this host's os, cpu and glibc", () => {
  expect(forThisHost({ os: ["linux"], cpu: ["x64"], libc: ["glibc"] }, "linux", "x64")).toBe(true);
  expect(forThisHost({ os: ["linux"], cpu: ["x64"], libc: ["musl"] }, "linux", "x64")).toBe(false);
  expect(forThisHost({ os: ["darwin"], cpu: ["arm64"] }, "linux", "x64")).toBe(false);
  expect(forThisHost({ os: ["!win32"] }, "linux", "x64")).toBe(true);
  expect(forThisHost({}, "linux", "x64")).toBe(true);
});

test("a package's optional platform dependencies come with it, and theirs too; node-llama-cpp's builds are chosen by name", () => {
  const pkgs: Record<string, object> = {
    sharp: { optionalDependencies: { "@img/sharp-linux-x64": "1", "@img/sharp-darwin-arm64": "1", "@img/sharp-linuxmusl-x64": "1" } },
    "@img/sharp-linux-x64": { os: ["linux"], cpu: [process.arch], libc: ["glibc"], optionalDependencies: { "@img/sharp-libvips-linux-x64": "1" } },
    "@img/sharp-libvips-linux-x64": { os: ["linux"], cpu: [process.arch], libc: ["glibc"] },
    "@img/sharp-darwin-arm64": { os: ["darwin"], cpu: ["arm64"] },
    "@img/sharp-linuxmusl-x64": { os: ["linux"], cpu: [process.arch], libc: ["musl"] },
    "node-llama-cpp": { optionalDependencies: { "@node-llama-cpp/linux-x64-cuda-ext": "1" } },
    "@node-llama-cpp/linux-x64-cuda-ext": { os: ["linux"], cpu: [process.arch] },
  };
  const read = (p: string) => (pkgs[p] ?? null) as never;
  expect(withPlatformPackages(["sharp", "node-llama-cpp"], read)).toEqual(["@img/sharp-libvips-linux-x64", "@img/sharp-linux-x64", "node-llama-cpp", "sharp"]);
});

test("llama.cpp's source in the pack holds what the CUDA build and llama-server configure from", () => {
  for (const p of ["CMakeLists.txt", "ggml/src/ggml-cuda", "ggml/include", "tools/server", "tools/mtmd", "vendor", "tools/ui/ui.h.in", "scripts/ui-assets.cmake"]) expect(LLAMA_SOURCE_PATHS).toContain(p);
});
