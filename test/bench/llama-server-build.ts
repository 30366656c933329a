// llama.cpp's own server for the vs-llama-server bench, built once from the very llama.cpp source
// node-llama-cpp ships and linked against node-llama-cpp's prebuilt libllama/libggml (the binaries
// our engine runs), so a comparison is server against server on one ggml: same release, same
// compiled kernels, same CPU variant (ggml scores the libggml-cpu-*.so linked beside the executable,
// as node-llama-cpp does in its bins folder). Only the server, common, mtmd and cpp-httplib are
// compiled (test/bench/llama-server/CMakeLists.txt), niced, two jobs (LLAMA_SERVER_BUILD_JOBS for
// more: the device check uses every core of a GPU machine): a few minutes on a 2-core box. The GPU
// backends are not linked: BENCH_DEVICE (chat-setup.ts) has ggml load one at run time.
// Cached in .cache/llama-server/build (a `release` stamp says which, "+prebuilt" marking this way of
// building; another release, or a build of the whole tree from before, rebuilds). An interrupted
// build resumes. Never run in CI.
//   bun test/bench/llama-server-build.ts   (prints the binary's path)
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { llamaTag, prebuiltLibDir } from "../../src/3-engines/llama/native/addon-path";
import { llamaCppSource } from "../../src/3-engines/llama/native/build";

export function ensureLlamaServer(log: (l: string) => void = (l) => console.log(l)): string {
  const dir = resolve(import.meta.dir, "..", "..", ".cache", "llama-server");
  const bin = join(dir, "build", "bin", "llama-server");
  const stamp = join(dir, "release");
  const release = `${llamaTag()}+prebuilt`;
  const built = existsSync(stamp) ? readFileSync(stamp, "utf8").trim() : null;
  if (built === release && existsSync(bin)) return bin;
  if (built !== null && built !== release) rmSync(join(dir, "build"), { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const src = llamaCppSource(log);
  const run = (cmd: string[]) => {
    // niced: the box is shared, and the build is not what is being measured
    const p = Bun.spawnSync(["nice", "-n", "19", ...cmd], { stdout: "inherit", stderr: "inherit" });
    if (p.exitCode !== 0) throw new Error(`${cmd.join(" ")} failed (exit ${p.exitCode})`);
  };
  const ninja = Bun.spawnSync(["sh", "-c", "command -v ninja"]).exitCode === 0 ? ["-G", "Ninja"] : [];
  log(`building llama-server ${llamaTag()} into ${dir} against ${prebuiltLibDir()} (once)`);
  run(["cmake", "-S", join(import.meta.dir, "llama-server"), "-B", join(dir, "build"), ...ninja, "-DCMAKE_BUILD_TYPE=Release",
    `-DLLAMA_SRC=${src}`, `-DLLAMA_LIBS=${prebuiltLibDir()}`, `-DLLAMA_TAG=${llamaTag()}`]);
  run(["cmake", "--build", join(dir, "build"), "--target", "llama-server", "--parallel", process.env.LLAMA_SERVER_BUILD_JOBS ?? "2"]);
  writeFileSync(stamp, release);
  return bin;
}

if (import.meta.main) console.log(ensureLlamaServer());
