import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";

// Under `set -o pipefail`, `producer | grep -q PATTERN` is false at random: grep exits at its first
// match, and a producer still writing (ldconfig -p prints ~100 KB, more than a pipe holds) dies of
// SIGPIPE, which pipefail reports as the pipe's status. device-check.sh said "no Vulkan loader" on a
// box that had one. Scripts grep a variable instead (grep -q PATTERN <<<"$text").
const root = join(import.meta.dir, "..", "..");

test("no script that sets pipefail pipes into grep -q", () => {
  const files = Bun.spawnSync(["git", "ls-files", "*.sh", ".ci/run"], { cwd: root }).stdout.toString().split("\n").filter(Boolean);
  expect(files.length).toBeGreaterThan(5);
  const found: string[] = [];
  for (const f of files) {
    const text = readFileSync(join(root, f), "utf8");
    if (!/pipefail/.test(text)) continue;
    text.split("\n").forEach((line, i) => {
      const code = line.replace(/(^|\s)#.*$/, "");
      if (/\|\s*grep\s+(-[a-zA-Z]*q|--quiet)/.test(code)) found.push(`${f}:${i + 1}: ${line.trim()}`);
    });
  }
  expect(found).toEqual([]);
});
