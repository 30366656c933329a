import { expect, test } from "bun:test";

// Tests that need a process of their own (one llama.cpp build per process: the Vulkan cases; a
// case that aborts its process) run their file again as a child `bun test`, with `env` telling the
// child which cases to run.

/** Runs `bun test <file>` in a child with `env` added; its exit code and everything it printed. */
export async function runTestFile(file: string, env: Record<string, string>): Promise<{ code: number; report: string }> {
  const child = Bun.spawn([process.execPath, "test", file], { env: { ...process.env, ...env }, stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  return { code, report: `${out}\n${err}` };
}

/** The child exited 0 with exactly `passes` tests passed and none failed (its output's tail shown otherwise). */
export function expectPassed({ code, report }: { code: number; report: string }, passes: number): void {
  expect({ code, report: code === 0 ? "" : report.slice(-6000) }).toEqual({ code: 0, report: "" });
  expect(report).toMatch(new RegExp(`\\b${passes} pass\\b`));
  expect(report).toMatch(/\b0 fail\b/);
}

/**
 * A file of cases run in a process of its own: in the child (`envVar` set) it loads the cases;
 * in the suite, one test runs the file again as that child and expects all `passes` to pass.
 */
export async function casesInOwnProcess(o: {
  file: string;
  envVar: string;
  cases: () => Promise<unknown>;
  title: string;
  passes: number;
  timeoutMs: number;
  /** More of the child's environment, made when the test runs. */
  env?: () => Record<string, string>;
}): Promise<void> {
  if (process.env[o.envVar] === "1") {
    await o.cases();
    return;
  }
  test(o.title, async () => expectPassed(await runTestFile(o.file, { ...o.env?.(), [o.envVar]: "1" }), o.passes), o.timeoutMs);
}
