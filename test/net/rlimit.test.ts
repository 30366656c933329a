import { expect, test } from "bun:test";
import { join } from "node:path";
import { parseProcLimits, readFdLimit } from "../../src/lib/net/rlimit";

// The open-files limit: read from /proc, and raised to the hard limit at start. Bun raises its own
// soft limit when it starts, so a child process lowers it first (through libc, as the server would
// find it under a shell's `ulimit -Sn 1024`) and then raises it with raiseFdLimit().

test("/proc/<pid>/limits is read for its open-files line", () => {
  const text = [
    "Limit                     Soft Limit           Hard Limit           Units     ",
    "Max processes             61289                61289                processes ",
    "Max open files            1024                 524288               files     ",
    "Max locked memory         8388608              8388608              bytes     ",
  ].join("\n");
  expect(parseProcLimits(text)).toEqual({ soft: 1024, hard: 524288 });
  expect(parseProcLimits("Max open files            unlimited            unlimited            files")).toEqual({ soft: Infinity, hard: Infinity });
  expect(parseProcLimits("nothing here")).toBeNull();
  expect(parseProcLimits(null)).toBeNull();
});

test("this process's limit is read", () => {
  const limit = readFdLimit()!;
  expect(limit.soft).toBeGreaterThan(0);
  expect(limit.hard).toBeGreaterThanOrEqual(limit.soft);
});

test("a soft limit below the hard one is raised to it", () => {
  const script = `
    import { dlopen, FFIType, ptr } from "bun:ffi";
    import { raiseFdLimit, readFdLimit } from ${JSON.stringify(join(import.meta.dir, "../../src/lib/net/rlimit.ts"))};
    const libc = dlopen("libc.so.6", { setrlimit: { args: [FFIType.i32, FFIType.ptr], returns: FFIType.i32 } });
    const hard = readFdLimit().hard;
    const lowered = new BigUint64Array([512n, hard === Infinity ? 0xffffffffffffffffn : BigInt(hard)]);
    if (libc.symbols.setrlimit(7, ptr(lowered)) !== 0) throw new Error("could not lower the limit");
    const seen = readFdLimit();
    const raised = raiseFdLimit();
    console.log(JSON.stringify({ seen, raised, now: readFdLimit() }));
  `;
  const r = Bun.spawnSync([process.execPath, "-e", script], { stderr: "pipe" });
  expect(r.stderr.toString()).toBe("");
  const { seen, raised, now } = JSON.parse(r.stdout.toString());
  const hard = readFdLimit()!.hard;
  expect(seen.soft).toBe(512);
  expect(raised.before).toEqual({ soft: 512, hard });
  expect(raised.after.soft).toBe(hard);
  expect(now.soft).toBe(hard);
});
