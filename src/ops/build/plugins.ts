import type { BunPlugin } from "bun";
import { existsSync, realpathSync } from "node:fs";
import { join, relative } from "node:path";
import { CUDA12_BINS, CUDA_BUILD_ENV, CUDA_SOURCE_BINS } from "../../3-engines/installed";

// Build plugins for the compiled executable. The native parts of the dependencies (node-llama-cpp's
// llama.cpp libraries, sharp's libvips, onnxruntime, the multimodal addon) are not embedded: they
// live in `lib/` beside the executable, keeping their package layout so their own RUNPATHs still
// find each other. The plugins turn the dependencies' runtime-computed lookups (import.meta.url of
// a file in node_modules, computed require() of .node files, platform packages chosen at run time)
// into paths under that `lib/` folder.

/** JS expression: the lib folder beside the executable (APPLIANCE_LIB_DIR overrides). */
export const LIB_EXPR = `(process.env.APPLIANCE_LIB_DIR || process.execPath.slice(0, process.execPath.lastIndexOf("/")) + "/lib")`;

/** Platform packages of node-llama-cpp that may exist for this machine. */
const HOST = `${process.platform}-${process.arch}`;

export function nativeLibPlugin(nodeModules: string): BunPlugin {
  // Bun hands the plugins real paths: a node_modules reached through a symlink (a shared or cached
  // folder) must be compared as its real path too, or files land at `lib/../../<elsewhere>`.
  const real = realpathSync(nodeModules);
  const rel = (path: string) => relative(real, path);
  return {
    name: "appliance-native-lib",
    setup(build) {
      // node-llama-cpp picks a prebuilt package per platform with dynamic imports: the other
      // platforms' packages are not installed and become modules that offer no binaries.
      build.onResolve({ filter: /^@node-llama-cpp\// }, (args) => {
        const name = args.path.split("/").slice(0, 2).join("/");
        const installed = existsSync(join(nodeModules, name, "package.json"));
        if (installed && name.startsWith(`@node-llama-cpp/${HOST}`)) return undefined;
        return { path: name, namespace: "appliance-absent" };
      });
      build.onLoad({ filter: /.*/, namespace: "appliance-absent" }, () => ({
        contents: "export function getBinsDir() { return {}; }",
        loader: "js",
      }));

      // node-llama-cpp loads a prebuilt binding in a forked test process first, forking
      // process.execPath with its own file: an executable cannot be forked that way. The chat
      // runtime (src/3-engines/llama/runtime.ts) chooses CUDA only where a device is present and
      // falls back to the CPU on a load error; a binding that crashes the process is not caught.
      build.onLoad({ filter: /node_modules\/node-llama-cpp\/dist\/bindings\/utils\/testBindingBinary\.js$/ }, () => ({
        contents: "export async function testBindingBinary() { return true; }",
        loader: "js",
      }));

      // protobufjs (onnx-proto, the demo ONNX generators) looks for optional modules with an
      // eval'd require at run time, which from an executable resolves against the working
      // directory's node_modules: never look (as in a folder without node_modules).
      build.onLoad({ filter: /node_modules\/@protobufjs\/inquire\/index\.js$/ }, () => ({
        contents: "module.exports = function inquire() { return null; };",
        loader: "js",
      }));

      // node-llama-cpp's CUDA package names its bins folder: the CUDA 12 build's or the source build's when asked.
      build.onLoad({ filter: new RegExp(`node_modules/@node-llama-cpp/${HOST}-cuda/dist/index\\.js$`) }, async (args) => {
        const version = JSON.parse(await Bun.file(join(args.path, "..", "..", "package.json")).text()).version as string;
        const bins = (dir: string) => `${LIB_EXPR} + ${JSON.stringify(`/${dir}`)}`;
        return {
          contents: [
            `export function getBinsDir() {`,
            `  const build = process.env.${CUDA_BUILD_ENV};`,
            `  const binsDir = build === "12" ? ${bins(CUDA12_BINS)} : build === "source" ? ${bins(CUDA_SOURCE_BINS)} : ${bins(`@node-llama-cpp/${HOST}-cuda/bins`)};`,
            `  return { binsDir, packageVersion: ${JSON.stringify(version)} };`,
            `}`,
          ].join("\n"),
          loader: "js",
        };
      });

      // Files that locate their package's folder through import.meta.url: point them at the
      // same relative place under lib/.
      build.onLoad({ filter: /node_modules\/(node-llama-cpp\/dist|@node-llama-cpp\/[^/]+\/dist)\/.*\.js$/ }, async (args) => {
        const text = await Bun.file(args.path).text();
        if (!text.includes("import.meta.url")) return { contents: text, loader: "js" };
        const url = `("file://" + ${LIB_EXPR} + ${JSON.stringify("/" + rel(args.path))})`;
        return { contents: text.replaceAll("import.meta.url", url), loader: "js" };
      });

      // sharp: the platform's .node from lib/@img/… (libvips beside it, found by its RPATH).
      build.onLoad({ filter: /node_modules\/sharp\/dist\/sharp\.mjs$/ }, async (args) => {
        const text = await Bun.file(args.path).text();
        const out = text.replace(/require\("(@img\/sharp-[a-z0-9-]+)\/sharp\.node"\)/g, (_m, pkg: string) => {
          const dir = join(nodeModules, pkg, "lib");
          const file = existsSync(dir) ? require("node:fs").readdirSync(dir).find((f: string) => f.endsWith(".node")) : undefined;
          return file ? `require(${LIB_EXPR} + ${JSON.stringify(`/${pkg}/lib/${file}`)})` : `(() => { throw new Error("sharp: ${pkg} is not shipped") })()`;
        });
        return { contents: out, loader: "js" };
      });

      // onnxruntime-node: its binding (and libonnxruntime beside it) from lib/onnxruntime-node/bin/….
      build.onLoad({ filter: /node_modules\/onnxruntime-node\/dist\/binding\.js$/ }, async (args) => {
        const text = await Bun.file(args.path).text();
        return {
          contents: text.replace("require(`../bin/napi-v6/", "require(" + LIB_EXPR + " + `/onnxruntime-node/bin/napi-v6/"),
          loader: "js",
        };
      });

      // transformers.js requires onnxruntime-node through createRequire at run time: make it a
      // static import so the bundler includes it (with the binding rewrite above).
      build.onLoad({ filter: /node_modules\/@huggingface\/transformers\/dist\/transformers\.node\.mjs$/ }, async (args) => {
        const text = await Bun.file(args.path).text();
        return {
          contents: `import __applianceOrt from "onnxruntime-node";\n` + text.replace(`requireFromHere("onnxruntime-node")`, "__applianceOrt"),
          loader: "js",
        };
      });
    },
  };
}
