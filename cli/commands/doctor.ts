import { Command } from "commander";
import { loadConfig } from "../../src/lib/config";
import type { Check } from "../../src/ops/doctor/check";
import { runDoctor, type DoctorReport } from "../../src/ops/doctor/doctor";
import { systemProbes } from "../../src/ops/doctor/probes";
import { globals, intOption } from "../context";
import { emit } from "../output";

const MARK: Record<Check["status"], string> = { ok: "✓", warn: "!", fail: "✗" };

/** One line per check (mark, name, detail), the hint indented below; a count at the end. */
export function renderReport(report: DoctorReport): string {
  const width = Math.max(...report.checks.map((c) => c.name.length));
  const lines: string[] = [];
  for (const c of report.checks) {
    const [first, ...rest] = c.detail.split("\n");
    lines.push(`${MARK[c.status]} ${c.name.padEnd(width)}  ${first}`);
    for (const more of rest) lines.push(`  ${" ".repeat(width)}  ${more}`);
    if (c.hint) lines.push(`    → ${c.hint}`);
  }
  const count = (s: Check["status"]) => report.checks.filter((c) => c.status === s).length;
  const [fails, warns] = [count("fail"), count("warn")];
  const warnings = warns ? `${warns} warning${warns === 1 ? "" : "s"}` : "";
  lines.push("");
  lines.push(fails ? `${fails} problem${fails === 1 ? "" : "s"} to fix${warnings ? `, ${warnings}` : ""}` : `no problems${warnings ? `; ${warnings}` : ""}`);
  return lines.join("\n");
}

export function doctorCommand(): Command {
  return new Command("doctor")
    .description("check what this machine offers the appliance (GPUs, CUDA, engines, model files, data dir, port); exit 1 when something required is missing")
    .option("--json", "print the checks as JSON")
    .option("--host <host>", "check this listen address instead of the configured one")
    .option("--port <n>", "check this port instead of the configured one", intOption("--port"))
    .action(async (opts: { json?: boolean; host?: string; port?: number }, c: Command) => {
      const g = globals(c);
      const load = () => loadConfig({ file: g.config, flags: { dataDir: g.dataDir, host: opts.host, port: opts.port } });
      const report = await runDoctor(load, systemProbes());
      emit(opts.json, report, renderReport);
      process.exitCode = report.ok ? 0 : 1;
    });
}
