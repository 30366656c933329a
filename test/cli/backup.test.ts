import { afterAll, expect, test } from "bun:test";
import { copyFileSync, existsSync, openSync, readdirSync, rmSync, writeSync } from "node:fs";
import { join } from "node:path";
import { validateConfig } from "../../src/lib/config";
import { memoryLogger } from "../../src/lib/log";
import { startServer, type RunningServer } from "../../src/main";
import { listTar } from "../../src/4-store/tar";
import { tempDir } from "../helpers/app";
import { cli } from "../helpers/cli";

// `appliance backup` while the server runs, and `appliance restore` into another data dir: the
// restored server knows the same keys, balances and stored files; damaged or misplaced restores
// change nothing.

const root = tempDir("appliance-backup-");
afterAll(() => rmSync(root, { recursive: true, force: true }));

const serve = (dir: string) =>
  startServer(validateConfig({ server: { data_dir: dir, port: 0 }, rentals: { discover: false }, engines: { device: "cpu", threads: 1 } }), {
    logger: memoryLogger(),
    banner: () => {},
  });
const api = (s: RunningServer, key: string, path: string, init: RequestInit = {}) =>
  fetch(s.url + path, { ...init, headers: { authorization: `Bearer ${key}`, ...(init.headers ?? {}) } });

const content = Array.from({ length: 200 }, (_, i) => JSON.stringify({ custom_id: `r${i}`, method: "POST", url: "/v1/embeddings", body: { model: "x", input: `line ${i}` } })).join("\n") + "\n";

test("an online backup restores into another data dir: same keys, balances and stored files", async () => {
  const dir = join(root, "live");
  const server = await serve(dir);
  let key = "";
  let fileId = "";
  try {
    key = (await server.deps.accounts.createKey({ account: "admin", kind: "premium", name: "kept" })).key;
    await server.deps.accounts.createAccount("team", { creditMicros: 12_340_000 });
    const form = new FormData();
    form.append("purpose", "batch");
    form.append("file", new File([content], "in.jsonl"));
    const up = await api(server, key, "/v1/files", { method: "POST", body: form });
    expect(up.status).toBe(200);
    fileId = ((await up.json()) as { id: string }).id;
    // Taken while the server runs and holds its lock.
    const b = cli(dir, ["-d", dir, "backup", join(root, "one.tar"), "--json"]);
    expect(b.stderr).toBe("");
    expect(b.code).toBe(0);
    const manifest = b.json();
    expect(manifest.entries.map((e: any) => e.name)).toEqual(["appliance.sqlite", `files/${fileId}`]);
    expect((await api(server, key, "/v1/models")).status).toBe(200); // still serving
  } finally {
    await server.stop();
  }
  // A plain tar: the system's tar lists it.
  const listed = Bun.spawnSync(["tar", "tf", join(root, "one.tar")]).stdout.toString().trim().split("\n");
  expect(listed).toEqual(["appliance.sqlite", `files/${fileId}`, "manifest.json"]);

  const other = join(root, "restored");
  const r = cli(other, ["-d", other, "restore", join(root, "one.tar")]);
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  const restored = await serve(other);
  try {
    expect((await api(restored, key, "/v1/models")).status).toBe(200);
    const got = await api(restored, key, `/v1/files/${fileId}/content`);
    expect(await got.text()).toBe(content);
    const team = restored.deps.db!.query("SELECT balance_micros FROM accounts WHERE name = 'team'").get() as { balance_micros: number };
    expect(team.balance_micros).toBe(12_340_000);
  } finally {
    await restored.stop();
  }
}, 60_000);

test("a damaged backup is refused naming the entry, and the data dir is left untouched", () => {
  const bad = join(root, "bad.tar");
  copyFileSync(join(root, "one.tar"), bad);
  const entry = listTar(bad).find((e) => e.name.startsWith("files/"))!;
  const fd = openSync(bad, "r+");
  writeSync(fd, Buffer.from("X"), 0, 1, entry.offset + 10);
  const target = join(root, "never");
  const r = cli(target, ["-d", target, "restore", bad]);
  expect(r.code).toBe(1);
  expect(r.stderr).toContain(`${entry.name} is damaged`);
  expect(r.stderr).toContain("nothing was restored");
  expect(existsSync(join(target, "appliance.sqlite"))).toBe(false);
  expect(readdirSync(target).filter((n) => n.startsWith(".restore-"))).toEqual([]);
  const junk = join(root, "junk.tar");
  Bun.write(junk, "not a tar at all".repeat(100));
  expect(cli(target, ["-d", target, "restore", junk]).stderr).toContain("is not an appliance backup");
});

test("restore refuses an existing store without --force, and a data dir a server is using; --force keeps the old store", async () => {
  const dir = join(root, "restored");
  const r = cli(dir, ["-d", dir, "restore", join(root, "one.tar")]);
  expect(r.code).toBe(1);
  expect(r.stderr).toContain("already has a store; --force replaces it");
  const server = await serve(dir);
  try {
    const busy = cli(dir, ["-d", dir, "restore", join(root, "one.tar"), "--force"]);
    expect(busy.code).toBe(1);
    expect(busy.stderr).toContain("is using the data dir");
  } finally {
    await server.stop();
  }
  const forced = cli(dir, ["-d", dir, "restore", join(root, "one.tar"), "--force", "--json"]);
  expect(forced.code).toBe(0);
  expect(existsSync(forced.json().kept_as)).toBe(true);
}, 60_000);
