import { afterAll, expect, test } from "bun:test";
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createProcessLauncher } from "../../src/2-services/rentals/launchers/process";
import { FAKE_JUPYTER, processesOf, until } from "../api/rentals/setup";

// The process launcher on its own: the real spawn of the stand-in JupyterLab, its readiness, its
// log, its stop (the whole process group), and that a pid it does not own is never signalled.

const dir = mkdtempSync(join(tmpdir(), "process-launcher-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const launcher = (command: string[]) => createProcessLauncher({ command, bind: "127.0.0.1", publicHost: "gpu-box.lan", stopGraceMs: 300 });

test("start, ready, log, stop: the server gets the GPU, token, port and work dir; stop ends it and what it started", async () => {
  const id = `rent_a${Date.now()}`;
  const workDir = mkdtempSync(join(dir, "rent_a-"));
  const l = launcher([process.execPath, FAKE_JUPYTER, "--delay-ms=300", "--stubborn-kernel"]);
  const handle = await l.start({ rentalId: id, gpus: ["GPU-aaaa", "GPU-bbbb"], token: "tok123", workDir });
  expect(handle.url).toMatch(/^http:\/\/gpu-box\.lan:\d+\/lab$/);
  expect(await l.probe(handle)).toBe("starting"); // listening only after 300 ms
  let state = await l.probe(handle);
  for (let i = 0; i < 100 && state !== "ready"; i++) state = (await Bun.sleep(50), await l.probe(handle));
  expect(state).toBe("ready");
  const port = handle.data.port as number;
  const lab = await (await fetch(`http://127.0.0.1:${port}/lab?token=tok123`)).json();
  expect(lab).toMatchObject({ lab: true, gpus: "GPU-aaaa,GPU-bbbb" });
  expect(lab.cwd).toBe(workDir);
  expect(await l.logs(handle, 1 << 20)).toContain(`fake-jupyter listening on ${port}`);
  expect(await l.logs(handle, 10)).toHaveLength(10);
  expect(processesOf(id)).toHaveLength(2); // the server and its "kernel" (which ignores SIGTERM)

  await l.stop(handle);
  expect(await l.probe(handle)).toBe("dead");
  expect(processesOf(id)).toEqual([]);
  await l.stop(handle); // already gone: safe
  expect(readFileSync(join(workDir, "jupyter.log"), "utf8")).toContain("listening");
});

test("the token reaches the notebook server in its environment (JUPYTER_TOKEN), never on its command line, which every local user can read", async () => {
  const id = `rent_t${Date.now()}`;
  const token = "tok-secret-9f8e7d6c5b4a";
  const workDir = mkdtempSync(join(dir, "rent_t-"));
  const l = launcher([process.execPath, FAKE_JUPYTER]);
  const handle = await l.start({ rentalId: id, gpus: ["GPU-aaaa"], token, workDir });
  try {
    const [pid] = processesOf(id);
    expect(pid).toBe(handle.data.pid as number);
    const cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8");
    expect(cmdline).toContain("--ServerApp.root_dir="); // it is the server's command line
    expect(cmdline).not.toContain(token);
    expect(readFileSync(`/proc/${pid}/environ`, "utf8").split("\0")).toContain(`JUPYTER_TOKEN=${token}`);
    expect(JSON.stringify(handle)).not.toContain(token); // nor in what is stored and shown as the handle
    let state = await l.probe(handle);
    for (let i = 0; i < 100 && state !== "ready"; i++) state = (await Bun.sleep(50), await l.probe(handle));
    expect((await fetch(`http://127.0.0.1:${handle.data.port}/lab?token=${token}`)).status).toBe(200); // and the server requires it
    expect((await fetch(`http://127.0.0.1:${handle.data.port}/lab?token=wrong`)).status).toBe(403);
  } finally {
    await l.stop(handle);
  }
});

test("reclaim stops what a launch started, found by its intent alone (the handle was never stored)", async () => {
  const id = `rent_r${Date.now()}`;
  const workDir = mkdtempSync(join(dir, "rent_r-"));
  const l = launcher([process.execPath, FAKE_JUPYTER, "--stubborn-kernel"]);
  const intent = JSON.parse(JSON.stringify(l.intent({ rentalId: id, gpus: [], token: "t", workDir })));
  expect(intent).toEqual({ launcher: "process", data: { env: `APPLIANCE_RENTAL_ID=${id}`, rentalId: id } });
  await l.start({ rentalId: id, gpus: [], token: "t", workDir }); // its handle is dropped, as by a kill -9
  expect(await until(async () => processesOf(id), (p) => p.length === 2)).toHaveLength(2); // the server and its kernel
  await l.reclaim(intent);
  expect(processesOf(id)).toEqual([]); // the kernel that ignores SIGTERM too
  await l.reclaim(intent); // nothing left: safe
});

test("start resolves once the notebook command runs (its environment carries the tag): a stop right after start always finds it", async () => {
  // Node's "spawn" can come before the child's exec; a stop in that window saw the appliance's own
  // environment in /proc, found nothing of the rental's, and the server started unstopped.
  const l = launcher([process.execPath, FAKE_JUPYTER]);
  const ids: string[] = [];
  for (let i = 0; i < 20; i++) {
    const id = `rent_s${Date.now()}x${i}`;
    ids.push(id);
    const handle = await l.start({ rentalId: id, gpus: [], token: "t", workDir: mkdtempSync(join(dir, "rent_s-")) });
    expect(processesOf(id)).toEqual([handle.data.pid as number]);
    await l.stop(handle);
  }
  await Bun.sleep(200); // what a missed stop leaves would be running by now
  expect(ids.flatMap(processesOf)).toEqual([]);
}, 30_000);

test("a pid that is not the rental's (reused, or another program) is dead to the launcher and never signalled", async () => {
  const other = Bun.spawn(["sleep", "30"]);
  try {
    const handle = { launcher: "process", url: "http://x/lab", data: { pid: other.pid, port: 1, log: join(dir, "none.log"), rentalId: "rent_b" } };
    const l = launcher([process.execPath, FAKE_JUPYTER]);
    expect(await l.probe(handle)).toBe("dead");
    await l.stop(handle);
    expect(other.killed).toBe(false);
    expect(other.exitCode).toBeNull();
    expect(() => process.kill(other.pid, 0)).not.toThrow();
  } finally {
    other.kill();
  }
});

test("health: a program on the PATH or an executable path is healthy; otherwise the fix is named", async () => {
  expect(await launcher(["sh", "-c", "true"]).health()).toBeNull();
  expect(await launcher(["no-such-jupyter-here"]).health()).toBe(
    "`no-such-jupyter-here` is not on the PATH (install JupyterLab (`pip install jupyterlab`) or set rentals.process.command)",
  );
  const script = join(dir, "lab.sh");
  writeFileSync(script, "#!/bin/sh\n");
  expect(await launcher([script]).health()).toContain("is not an executable file");
  chmodSync(script, 0o755);
  expect(await launcher([script]).health()).toBeNull();
});
