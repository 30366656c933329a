import { plugin } from "bun";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { CUDA12_BINS, CUDA_BUILD_ENV, CUDA_SOURCE_BINS } from "../../src/3-engines/installed";

// Preloaded into every bun process of the device check (test/gpu/device-check.sh, through
// BUN_OPTIONS="--preload=…"): for bun running from the checkout, what the executable's build
// plugin does for the executable (src/ops/build/plugins.ts): node-llama-cpp's CUDA package names the
// bins folder of the build APPLIANCE_LLAMA_CUDA_BUILD asks for ("source", "12"), under the lib
// folder DEVICE_CHECK_LIB (test/gpu/cuda-lib.ts assembles it as the executable's lib/ is laid out).
// So the decode probe (cuda-probe.ts) tries every CUDA build from the checkout. From the checkout
// the runtime offers only "13" (cudaBuilds()), and selecting it clears APPLIANCE_LLAMA_CUDA_BUILD:
// DEVICE_CHECK_CUDA_BUILD (the build that decoded) is then the one loaded, so every later step of
// the check, our server and the test suite included, runs on it. Test setup only; without
// DEVICE_CHECK_LIB this does nothing.

const lib = process.env.DEVICE_CHECK_LIB;
const HOST = `${process.platform}-${process.arch}`;

if (lib) {
  plugin({
    name: "device-check-cuda-bins",
    setup(build) {
      build.onLoad({ filter: new RegExp(`node_modules/@node-llama-cpp/${HOST}-cuda/dist/index\\.js$`) }, (args) => {
        const pkg = join(args.path, "..", "..");
        const version = (JSON.parse(readFileSync(join(pkg, "package.json"), "utf8")) as { version: string }).version;
        const folders = { "12": join(lib, CUDA12_BINS), source: join(lib, CUDA_SOURCE_BINS), "13": join(pkg, "bins") };
        return {
          contents: [
            `const folders = ${JSON.stringify(folders)};`,
            `export function getBinsDir() {`,
            `  const build = process.env.${CUDA_BUILD_ENV} ?? process.env.DEVICE_CHECK_CUDA_BUILD ?? "13";`,
            `  return { binsDir: folders[build] ?? folders["13"], packageVersion: ${JSON.stringify(version)} };`,
            `}`,
          ].join("\n"),
          loader: "js",
        };
      });
    },
  });
}
