import { dlopen, FFIType, ptr } from "bun:ffi";
import { readFileSync } from "node:fs";

// The process's limit on open file descriptors (RLIMIT_NOFILE). Every connection holds one; at the
// limit the listener accepts nothing and answers nothing. The soft limit is what counts, and a
// process may raise it up to the hard limit, so the server does that at start (Bun 1.4 already does
// it for itself; this makes it explicit and reports the outcome). Raising the hard limit needs the
// service manager: systemd's LimitNOFILE= (install.sh's unit sets one), or `ulimit -Hn` as root.
// libc through bun:ffi, as src/3-engines/dlopen.ts does; it works in the compiled executable too.

/** RLIMIT_NOFILE on Linux (asm-generic/resource.h; the same on x86-64 and arm64). */
const RLIMIT_NOFILE = 7;
/** rlim_t is an unsigned long; RLIM_INFINITY is all ones. */
const RLIM_INFINITY = 0xffff_ffff_ffff_ffffn;

export interface FdLimit {
  /** The limit in force; Infinity for none. */
  soft: number;
  /** The most the soft limit may be raised to without privilege; Infinity for none. */
  hard: number;
}

const toNumber = (v: bigint) => (v === RLIM_INFINITY ? Infinity : Number(v));

function libc() {
  return dlopen("libc.so.6", {
    getrlimit: { args: [FFIType.i32, FFIType.ptr], returns: FFIType.i32 },
    setrlimit: { args: [FFIType.i32, FFIType.ptr], returns: FFIType.i32 },
  });
}

/** The limit as /proc/<pid>/limits states it ("Max open files  1024  524288  files"); null if absent. */
export function parseProcLimits(text: string | null): FdLimit | null {
  const m = text && /^Max open files\s+(\d+|unlimited)\s+(\d+|unlimited)/m.exec(text);
  if (!m) return null;
  const n = (s: string) => (s === "unlimited" ? Infinity : Number(s));
  return { soft: n(m[1]!), hard: n(m[2]!) };
}

/** This process's limit; null where it cannot be read (not Linux). */
export function readFdLimit(): FdLimit | null {
  try {
    return parseProcLimits(readFileSync("/proc/self/limits", "utf8"));
  } catch {
    return null;
  }
}

/**
 * Raises the soft limit to the hard one (or to fs.nr_open, the kernel's ceiling, where the hard
 * limit is unlimited). Returns the limit before and after, or the reason it could not.
 */
export function raiseFdLimit(): { before: FdLimit; after: FdLimit } | { error: string } {
  let lib: ReturnType<typeof libc>;
  try {
    lib = libc();
  } catch (e) {
    return { error: `libc not loadable: ${(e as Error).message}` };
  }
  try {
    const buf = new BigUint64Array(2);
    if (lib.symbols.getrlimit(RLIMIT_NOFILE, ptr(buf)) !== 0) return { error: "getrlimit failed" };
    const before = { soft: toNumber(buf[0]!), hard: toNumber(buf[1]!) };
    if (buf[0] === buf[1]) return { before, after: before };
    let target = buf[1]!;
    if (target === RLIM_INFINITY) target = BigInt(nrOpen());
    if (target <= buf[0]!) return { before, after: before };
    buf[0] = target;
    if (lib.symbols.setrlimit(RLIMIT_NOFILE, ptr(buf)) !== 0) return { error: `setrlimit to ${target} failed` };
    return { before, after: { soft: Number(target), hard: before.hard } };
  } finally {
    lib.close();
  }
}

/** fs.nr_open: no process may have more descriptors than this (1048576 by default). */
function nrOpen(): number {
  try {
    return Number(readFileSync("/proc/sys/fs/nr_open", "utf8").trim()) || 1_048_576;
  } catch {
    return 1_048_576;
  }
}
