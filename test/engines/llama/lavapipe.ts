import { join } from "node:path";

// Test setup only: builds lavapipe-descriptors.c (why: in that file) into `dir` and returns the
// environment that preloads it into a child process, beside LLVMPIPE_ENV (test/helpers/vulkan.ts).
// The C compiler is the one the llama addon's build needs anyway.

export function lavapipeDescriptorsEnv(dir: string): { LD_PRELOAD: string } {
  const out = join(dir, "liblavapipe-descriptors.so");
  const src = join(import.meta.dir, "lavapipe-descriptors.c");
  const cc = Bun.which("cc") ?? Bun.which("gcc") ?? Bun.which("clang");
  if (!cc) throw new Error("no C compiler (cc) to build the lavapipe descriptor workaround the Vulkan image test needs");
  const r = Bun.spawnSync([cc, "-shared", "-fPIC", "-O2", "-Wall", "-o", out, src, "-ldl"], { stdout: "pipe", stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`building ${src} failed: ${r.stderr.toString()}`);
  return { LD_PRELOAD: out };
}
