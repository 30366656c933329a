import { afterAll, expect, test } from "bun:test";
import { copyFileSync, existsSync, mkdirSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { nativeLibPlugin } from "../../src/ops/build/plugins";
import { tempDir } from "../helpers/app";

// The build plugins point the dependencies' own lookups (import.meta.url of a file in node_modules)
// at the executable's lib/. Bun hands plugins real paths; a checkout whose node_modules is a
// symlink (a shared or cached folder) made those lookups `lib/../../../<real path>`, which path.join
// folds into the build machine's absolute node_modules: the executable then failed to start on any
// other host ("ENOENT … /work/main/node_modules/node-llama-cpp/llama/binariesGithubRelease.json").

const root = tempDir("appliance-plugins-");
afterAll(() => rmSync(root, { recursive: true, force: true }));
const HOST = `${process.platform}-${process.arch}`;
const NM = resolve(import.meta.dir, "..", "..", "node_modules");

test("a package's own folder lookup lands under lib/, also when node_modules is reached through a symlink", async () => {
  if (!existsSync(join(NM, "@node-llama-cpp", HOST, "package.json"))) throw new Error(`@node-llama-cpp/${HOST} is not installed`);
  const link = join(root, "nm-link");
  symlinkSync(NM, link);
  mkdirSync(resolve(NM, "..", ".cache"), { recursive: true });
  const entry = resolve(NM, "..", ".cache", `plugins-entry-${process.pid}.ts`);
  // the CPU package computes its bins folder from import.meta.url, as node-llama-cpp's own files do
  writeFileSync(entry, `import { getBinsDir } from "@node-llama-cpp/${HOST}";\nconsole.log(getBinsDir().binsDir);\n`);
  // a lib/ holding what that package reads at load (its package.json)
  const lib = join(root, "lib");
  mkdirSync(join(lib, "@node-llama-cpp", HOST), { recursive: true });
  copyFileSync(join(NM, "@node-llama-cpp", HOST, "package.json"), join(lib, "@node-llama-cpp", HOST, "package.json"));
  for (const [name, nodeModules] of [["direct", NM], ["symlinked", link]] as const) {
    const out = join(root, name);
    const r = await Bun.build({ entrypoints: [entry], outdir: out, target: "bun", plugins: [nativeLibPlugin(nodeModules)] } as Parameters<typeof Bun.build>[0]);
    expect(r.success).toBe(true);
    const bundle = join(out, readdirSync(out).find((f) => f.endsWith(".js"))!);
    const run = Bun.spawnSync([process.execPath, bundle], { env: { ...process.env, APPLIANCE_LIB_DIR: lib } });
    expect([name, run.stdout.toString().trim(), run.stderr.toString()]).toEqual([name, `${lib}/@node-llama-cpp/${HOST}/bins`, ""]);
  }
  rmSync(entry, { force: true });
});
