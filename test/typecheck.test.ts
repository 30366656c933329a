import { expect, test } from "bun:test";
import { join } from "node:path";

test("the project type-checks", () => {
  const root = join(import.meta.dir, "..");
  const r = Bun.spawnSync([process.execPath, join(root, "node_modules", "typescript", "bin", "tsc"), "-p", join(root, ".ci", "tsconfig.json")], {
    cwd: root,
    stdout: "pipe",
    stderr: "pipe",
  });
  expect(r.stdout.toString() + r.stderr.toString()).toBe("");
  expect(r.exitCode).toBe(0);
}, 120_000);
