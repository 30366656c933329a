import { afterAll, expect, test } from "bun:test";
import { lstatSync, mkdirSync, readlinkSync, rmSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "./helpers/app";

const ROOT = join(import.meta.dir, "..");
const prefix = tempDir("appliance-prefix-");
afterAll(() => rmSync(prefix, { recursive: true, force: true }));

// The bun running these tests goes first on PATH under its own name, so nothing is downloaded
// (installed from npm, its binary is called bun.exe).
const binDir = join(prefix, "test-bin");
mkdirSync(binDir);
symlinkSync(process.execPath, join(binDir, "bun"));

function install(...args: string[]) {
  const r = Bun.spawnSync(["bash", join(ROOT, "install.sh"), ...args], {
    env: { ...process.env, PATH: `${binDir}:${process.env.PATH}`, HOME: prefix },
    stdout: "pipe",
    stderr: "pipe",
  });
  return { code: r.exitCode, out: r.stdout.toString() + r.stderr.toString() };
}

test("install.sh installs `appliance` and `bun` under a prefix, and running it twice is safe", () => {
  for (let i = 0; i < 2; i++) {
    const r = install("--prefix", prefix);
    expect(r.out).not.toContain("error");
    expect(r.code).toBe(0);
  }
  expect(lstatSync(join(prefix, "bin", "bun")).isSymbolicLink()).toBe(true);
  expect(readlinkSync(join(prefix, "bin", "bun"))).toBe(process.execPath);
  const v = Bun.spawnSync([join(prefix, "bin", "appliance"), "--version"]);
  expect(v.exitCode).toBe(0);
  expect(v.stdout.toString().trim()).toMatch(/^\d+\.\d+\.\d+$/);
}, 120_000);

test("install.sh refuses an unknown option with a non-zero exit", () => {
  const r = install("--frobnicate");
  expect(r.code).toBe(2);
  expect(r.out).toContain("unknown option");
});
