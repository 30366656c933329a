import { expect, test } from "bun:test";
import { runDoctor } from "../../src/ops/doctor/doctor";
import { checkFdLimit } from "../../src/ops/doctor/limits";
import { configIn, fakeProbes } from "./fakes";

const config = configIn("/nonexistent/appliance-doctor-limits");

// `appliance doctor`'s line on the open-files limit (issue 41 H3: at the limit the server accepts
// and answers nothing). The server raises its soft limit to the hard one, so the hard one counts.

test("a hard limit of 65536 is fine, and the line says the server raises its soft limit to it", () => {
  const line = checkFdLimit({ soft: 1024, hard: 65536 });
  expect(line).toMatchObject({ name: "open files", status: "ok" });
  expect(line.detail).toBe("soft limit 1024, hard 65536: the server raises its soft limit to 65536 at start (one descriptor per connection)");
});

test("a hard limit under 8192 is a warning that says how to raise it", () => {
  const line = checkFdLimit({ soft: 1024, hard: 4096 });
  expect(line.status).toBe("warn");
  expect(line.detail).toContain("fewer than 8192");
  expect(line.hint).toContain("LimitNOFILE=65536");
  expect(line.hint).toContain("ulimit -n");
});

test("no limit is fine; a limit that cannot be read is said so", () => {
  expect(checkFdLimit({ soft: Infinity, hard: Infinity })).toMatchObject({ status: "ok", detail: expect.stringContaining("hard unlimited") });
  expect(checkFdLimit(null)).toMatchObject({ status: "ok", detail: expect.stringContaining("could not be read") });
});

test("doctor reports it, with or without a config that loads, and a low limit does not fail the report", async () => {
  const probes = fakeProbes({ fdLimit: () => ({ soft: 1024, hard: 1024 }) });
  const report = await runDoctor(() => ({ config: config({}), file: null }), probes, () => []);
  expect(report.checks.find((c) => c.name === "open files")!.status).toBe("warn");
  expect(report.ok).toBe(true);
  const broken = await runDoctor(() => {
    throw new Error("no config");
  }, probes);
  expect(broken.checks.map((c) => c.name)).toContain("open files");
});
