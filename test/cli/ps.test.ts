import { afterAll, beforeAll, expect, test } from "bun:test";
import { existsSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ensureChatModel } from "../../models/cache";
import { tempDir } from "../helpers/app";
import { CLI, serveCli } from "../helpers/cli";

// `appliance ps` against a real `appliance serve` in a child process: the list, load and unload
// through the control socket (<data_dir>/control.sock, owner-only), and the message when no server
// runs. The CLI runs as a child too, asynchronously, so the server's pipes are read meanwhile.

const dir = tempDir("appliance-ps-");
let config: string;
let server: Awaited<ReturnType<typeof serveCli>> | null = null;

async function start() {
  const s = await serveCli(dir, ["--port", "0"], { APPLIANCE_CONFIG: config });
  // Drain what it logs, so a full pipe never stalls it.
  void (async () => {
    for await (const _ of s.child.stdout as ReadableStream<Uint8Array>);
  })();
  void (async () => {
    for await (const _ of s.child.stderr as ReadableStream<Uint8Array>);
  })();
  return s;
}

async function ps(args: string[], dataDir = dir) {
  const child = Bun.spawn([process.execPath, CLI, "ps", ...args], {
    env: { PATH: process.env.PATH ?? "", HOME: dataDir, XDG_CONFIG_HOME: join(dataDir, "no-config"), APPLIANCE_DATA_DIR: dataDir, ...(dataDir === dir ? { APPLIANCE_CONFIG: config } : {}) },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  return { code, stdout, stderr, json: () => JSON.parse(stdout) };
}

beforeAll(async () => {
  const chat = await ensureChatModel("chat");
  const small = await ensureChatModel("small-chat");
  config = join(dir, "config.toml");
  writeFileSync(
    config,
    `[server]\nlog_level = "info"\n[engines]\ndevice = "cpu"\nthreads = 1\n[rentals]\ndiscover = false\n` +
      `[[models]]\nid = "chat"\nname = "chat"\nkind = "chat"\nfiles = { model = "${chat}" }\nmax_context = 2048\nslots = 2\nload = "first_use"\n` +
      `[[models]]\nid = "small-chat"\nname = "small"\nkind = "chat"\nfiles = { model = "${small}" }\nmax_context = 1024\nslots = 1\nload = "start"\n`,
  );
  server = await start();
}, 150_000);

afterAll(() => {
  server?.child.kill("SIGKILL");
  rmSync(dir, { recursive: true, force: true });
});

test("the server listens on <data_dir>/control.sock, a socket only its owner may open (0600)", () => {
  const st = statSync(join(dir, "control.sock"));
  expect(st.isSocket()).toBe(true);
  expect(st.mode & 0o777).toBe(0o600);
});

test("ps --json lists every model: the pinned one loaded, the first_use one not", async () => {
  const r = await ps(["--json"]);
  expect(r.code).toBe(0);
  const models = r.json() as any[];
  expect(models.map((m) => m.id)).toEqual(["chat", "small-chat"]);
  expect(models[0]).toMatchObject({ id: "chat", kind: "chat", state: "unloaded", pinned: false, keep_alive_s: 300, in_flight: 0, memory_mb: null });
  expect(models[1]).toMatchObject({ id: "small-chat", state: "loaded", pinned: true, keep_alive_s: -1, in_flight: 0 });
}, 30_000);

test("ps load, ps, ps unload: the table follows the model's state", async () => {
  const loaded = await ps(["load", "chat", "--json"]);
  expect(loaded.code).toBe(0);
  expect(loaded.json()).toMatchObject({ id: "chat", state: "loaded" });

  const table = await ps([]);
  expect(table.code).toBe(0);
  const [header, ...rows] = table.stdout.trimEnd().split("\n");
  for (const col of ["MODEL", "KIND", "STATE", "DEVICE", "GPU LAYERS", "CONTEXT×SLOTS", "MEMORY (GPU/CPU MB)", "IN FLIGHT", "IDLE", "KEEP ALIVE"]) expect(header).toContain(col);
  expect(rows.find((l) => l.startsWith("chat "))).toMatch(/^chat\s+chat\s+loaded\s.*\s5m$/);
  expect(rows.find((l) => l.startsWith("small-chat "))).toMatch(/\bloaded\b.*\bpinned$/);

  const unloaded = await ps(["unload", "chat"]);
  expect(unloaded).toMatchObject({ code: 0, stdout: "chat: unloaded\n" });
  expect(((await ps(["--json"])).json() as any[])[0].state).toBe("unloaded");
  expect((await ps(["unload", "chat", "--json"])).json()).toEqual({ id: "chat", result: "not_loaded" });
}, 60_000);

test("an unknown model is the server's message and exit code 1", async () => {
  const r = await ps(["load", "nope"]);
  expect(r.code).toBe(1);
  expect(r.stderr).toBe('error: model not found: "nope"\n');
}, 30_000);

test("with no server on the data dir: a clear message and exit code 1", async () => {
  const empty = tempDir("appliance-ps-none-");
  try {
    for (const args of [[], ["--json"], ["load", "chat"], ["unload", "chat"]]) {
      const r = await ps(args, empty);
      expect(r.code).toBe(1);
      expect(r.stdout).toBe("");
      expect(r.stderr).toBe(`error: no server is running on the data dir ${empty} (start one with \`appliance serve\`)\n`);
    }
  } finally {
    rmSync(empty, { recursive: true, force: true });
  }
}, 30_000);

test("a stopped server removes its socket; a killed one's is replaced at the next start", async () => {
  server!.child.kill("SIGTERM");
  expect(await server!.child.exited).toBe(0);
  expect(existsSync(join(dir, "control.sock"))).toBe(false);
  expect((await ps([])).stderr).toContain("no server is running on the data dir");

  server = await start();
  server.child.kill("SIGKILL");
  await server.child.exited;
  expect(existsSync(join(dir, "control.sock"))).toBe(true); // left behind
  expect((await ps([])).stderr).toContain("no server is running on the data dir");

  server = await start();
  const st = statSync(join(dir, "control.sock"));
  expect(st.mode & 0o777).toBe(0o600);
  expect((await ps(["--json"])).json().map((m: any) => m.id)).toEqual(["chat", "small-chat"]);
}, 150_000);
