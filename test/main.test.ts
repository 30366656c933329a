import { afterAll, expect, test } from "bun:test";
import { existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import { validateConfig } from "../src/lib/config";
import { memoryLogger } from "../src/lib/log";
import { startServer } from "../src/main";
import { DataDirBusyError } from "../src/4-store/lock";
import { tempDir } from "./helpers/app";
import { cli, serveCli } from "./helpers/cli";

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
function config(dir?: string) {
  const d = dir ?? tempDir();
  dirs.push(d);
  return validateConfig({ server: { data_dir: d, port: 0 } });
}

test("the first start creates an admin account and prints its key once; the key works over real HTTP", async () => {
  const cfg = config();
  const banner: string[] = [];
  const s = await startServer(cfg, { logger: memoryLogger(), banner: (l) => banner.push(l) });
  try {
    const key = /sk-apl-[0-9A-Za-z]{44}/.exec(banner.join("\n"))?.[0];
    expect(key).toBeDefined();
    const res = await fetch(`${s.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ object: "list", data: [] });
    expect((await fetch(`${s.url}/v1/models`)).status).toBe(401);
    expect(await s.deps.accounts.getAccount("admin")).toMatchObject({ role: "admin", balance_micros: 10_000_000 });
  } finally {
    await s.stop();
  }
  // A restart on the same data dir creates nothing new and prints no key.
  const again: string[] = [];
  const s2 = await startServer(cfg, { logger: memoryLogger(), banner: (l) => again.push(l) });
  expect(again.join("\n")).not.toContain("sk-apl-");
  expect(await s2.deps.accounts.listAccounts()).toHaveLength(1);
  await s2.stop();
});

test("a key revoked with the CLI while the server runs stops working within 0.1 s", async () => {
  const cfg = config();
  const banner: string[] = [];
  const s = await startServer(cfg, { logger: memoryLogger(), banner: (l) => banner.push(l) });
  try {
    const key = /sk-apl-[0-9A-Za-z]{44}/.exec(banner.join("\n"))![0];
    const get = () => fetch(`${s.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
    expect((await get()).status).toBe(200);
    const r = cli(cfg.server.data_dir, ["keys", "revoke", key]);
    expect(r.code).toBe(0);
    await Bun.sleep(150);
    expect((await get()).status).toBe(401);
  } finally {
    await s.stop();
  }
});

test("a second server on the same data dir is refused while the first runs", async () => {
  const cfg = config();
  const s = await startServer(cfg, { logger: memoryLogger(), banner: () => {} });
  try {
    await expect(startServer(cfg, { logger: memoryLogger(), banner: () => {} })).rejects.toBeInstanceOf(DataDirBusyError);
  } finally {
    await s.stop();
  }
  expect(existsSync(join(cfg.server.data_dir, "server.pid"))).toBe(false);
});

test("`appliance serve` listens, answers with the printed key and stops cleanly on SIGTERM", async () => {
  const dir = tempDir();
  dirs.push(dir);
  const { child, url, banner } = await serveCli(dir, ["--port", "0", "--demo"]);
  const key = /sk-apl-[0-9A-Za-z]{44}/.exec(banner)![0];
  const res = await fetch(`${url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
  expect(res.status).toBe(200);
  expect((await fetch(`${url}/health`)).status).toBe(200);
  child.kill("SIGTERM");
  expect(await child.exited).toBe(0);
  const logs = (await new Response(child.stdout).text()).trim().split("\n").map((l) => JSON.parse(l));
  expect(logs.some((l) => l.msg === "request" && l.route === "/v1/models" && l.status === 200)).toBe(true);
  expect(logs.at(-1).msg).toBe("stopped");
  expect(JSON.stringify(logs)).not.toContain(key);
}, 30_000);
