import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

// Stub libraries for a machine with nvcc and no GPU (this project's build machines): the NVIDIA
// driver's libcuda.so.1 and cuBLAS's libcublas.so.13, which a CUDA build of ggml links against and
// loads, made here under those sonames. Each function a library needs from them is defined and
// returns an error code (nothing runs a kernel); only the test of the source build uses them, and
// nothing built with them is installed.

export const STUB_INCLUDE = join(import.meta.dir, "cuda-stubs", "include");

function compile(dir: string, soname: string, body: string): string {
  mkdirSync(dir, { recursive: true });
  const c = join(dir, `${soname}.c`);
  writeFileSync(c, body);
  const out = join(dir, soname);
  const r = Bun.spawnSync(["cc", "-shared", "-fPIC", "-o", out, `-Wl,-soname,${soname}`, c], { stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`cc ${soname}: ${r.stderr.toString()}`);
  return out;
}

/** libcublas.so.13 and libcuda.so.1 defining `symbols` (none: empty, enough to link a shared library). */
export function makeCudaStubs(dir: string, symbols: { cublas: string[]; cuda: string[] } = { cublas: [], cuda: [] }) {
  // cuBLAS: CUBLAS_STATUS_NOT_INITIALIZED (1); the driver: CUDA_ERROR_NO_DEVICE (100); a status string where one is asked.
  const fns = (names: string[], code: number) =>
    names.map((n) => (n === "cublasGetStatusString" ? `const char *${n}(int s) { return "stub"; }` : `int ${n}(void) { return ${code}; }`)).join("\n");
  return {
    cublas: compile(dir, "libcublas.so.13", `${fns(symbols.cublas, 1)}\n`),
    cuda: compile(dir, "libcuda.so.1", `${fns(symbols.cuda, 100)}\n`),
  };
}

/** The functions `library` takes from cuBLAS and from the driver (its undefined dynamic symbols). */
export function neededFromCuda(library: string): { cublas: string[]; cuda: string[] } {
  const r = Bun.spawnSync(["nm", "-D", "--undefined-only", library], { stdout: "pipe", stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`nm ${library}: ${r.stderr.toString()}`);
  const names = r.stdout
    .toString()
    .split("\n")
    .map((l) => l.trim().split(/\s+/).pop() ?? "")
    .map((n) => n.replace(/@.*$/, ""));
  return { cublas: [...new Set(names.filter((n) => n.startsWith("cublas")))], cuda: [...new Set(names.filter((n) => /^cu[A-Z]/.test(n)))] };
}
