// llama.cpp's own server, built once from the very llama.cpp source node-llama-cpp ships (same
// release as the engine's prebuilt libraries), so a comparison is engine against engine. Native
// CPU flags (the prebuilt picks the best of its CPU variants at run time). Cached in
// .cache/llama-server/build (a `release` stamp says which; another release rebuilds). An
// interrupted build resumes. About an hour on a 2-core box; never run in CI.
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { join, resolve } from "node:path";
import { llamaTag } from "../../src/engines/llama/native/addon-path";
import { llamaCppSource } from "../../src/engines/llama/native/build";

export function ensureLlamaServer(log: (l: string) => void = (l) => console.log(l)): string {
  const dir = resolve(import.meta.dir, "..", "..", ".cache", "llama-server");
  const bin = join(dir, "build", "bin", "llama-server");
  const stamp = join(dir, "release");
  const built = existsSync(stamp) ? readFileSync(stamp, "utf8").trim() : null;
  if (built === llamaTag() && existsSync(bin)) return bin;
  if (built !== null && built !== llamaTag()) rmSync(join(dir, "build"), { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const src = llamaCppSource(log);
  const run = (cmd: string[]) => {
    const p = Bun.spawnSync(cmd, { stdout: "inherit", stderr: "inherit" });
    if (p.exitCode !== 0) throw new Error(`${cmd.join(" ")} failed (exit ${p.exitCode})`);
  };
  const ninja = Bun.spawnSync(["sh", "-c", "command -v ninja"]).exitCode === 0 ? ["-G", "Ninja"] : [];
  log(`building llama-server ${llamaTag()} into ${dir} (once)`);
  run(["cmake", "-S", src, "-B", join(dir, "build"), ...ninja, "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF", "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF", "-DBUILD_SHARED_LIBS=OFF"]);
  run(["cmake", "--build", join(dir, "build"), "--target", "llama-server", "--parallel", String(availableParallelism())]);
  writeFileSync(stamp, llamaTag());
  return bin;
}

if (import.meta.main) console.log(ensureLlamaServer());
