import { afterAll, expect, test } from "bun:test";
import { existsSync, lstatSync, mkdirSync, readFileSync, readlinkSync, rmSync, symlinkSync } from "node:fs";
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

const unitDir = join(prefix, "units");

function install(...args: string[]) {
  const r = Bun.spawnSync(["bash", join(ROOT, "install.sh"), ...args], {
    env: { ...process.env, PATH: `${binDir}:${process.env.PATH}`, HOME: prefix, XDG_CONFIG_HOME: join(prefix, ".config"), XDG_DATA_HOME: join(prefix, "data"), APPLIANCE_SYSTEMD_DIR: unitDir },
    stdout: "pipe",
    stderr: "pipe",
  });
  return { code: r.exitCode, out: r.stdout.toString() + r.stderr.toString() };
}

test("install.sh installs the executable, `bun`, a config and a systemd unit under a prefix; twice is safe; the executable answers /health", async () => {
  let out = "";
  for (let i = 0; i < 2; i++) {
    const r = install("--prefix", prefix, "--systemd");
    expect(r.out).not.toContain("error");
    expect(r.code).toBe(0);
    out = r.out;
  }
  expect(out).toContain("keeping"); // the second run keeps the config the first one wrote
  expect(out).toContain("GPU:"); // and says what the host offers CUDA
  expect(lstatSync(join(prefix, "bin", "bun")).isSymbolicLink()).toBe(true);
  expect(readlinkSync(join(prefix, "bin", "bun"))).toBe(process.execPath);
  const exe = join(prefix, "lib", "appliance", "current", "appliance");
  expect(readlinkSync(join(prefix, "bin", "appliance"))).toBe(exe);
  expect(existsSync(join(prefix, "lib", "appliance", "current", "lib", "node-llama-cpp", "package.json"))).toBe(true);
  const config = readFileSync(join(prefix, ".config", "appliance", "config.toml"), "utf8");
  expect(config).toContain(`data_dir = "${join(prefix, "data", "appliance")}"`);
  expect(readFileSync(join(unitDir, "appliance.service"), "utf8")).toContain(`ExecStart=${exe} serve --config ${join(prefix, ".config", "appliance", "config.toml")}`);
  const v = Bun.spawnSync([join(prefix, "bin", "appliance"), "--version"]);
  expect(v.exitCode).toBe(0);
  expect(v.stdout.toString().trim()).toMatch(/^\d+\.\d+\.\d+$/);

  // The installed executable, outside the checkout, with no Bun on PATH, serves /health.
  const port = 20000 + Math.floor(Math.random() * 20000);
  const child = Bun.spawn([join(prefix, "bin", "appliance"), "serve", "--port", String(port), "-d", join(prefix, "serve-data")], {
    cwd: prefix,
    env: { HOME: prefix, PATH: "/usr/bin:/bin", TMPDIR: process.env.TMPDIR ?? "/tmp" },
    stdout: "ignore",
    stderr: "ignore",
  });
  try {
    let health: any = null;
    for (let i = 0; i < 100 && !health; i++) {
      health = await fetch(`http://127.0.0.1:${port}/health`).then((r) => r.json()).catch(() => null);
      if (!health) await Bun.sleep(100);
    }
    expect(health?.status).toBe("ok");
  } finally {
    child.kill("SIGTERM");
    await child.exited;
  }
}, 240_000);

test("install.sh refuses an unknown option with a non-zero exit", () => {
  const r = install("--frobnicate");
  expect(r.code).toBe(2);
  expect(r.out).toContain("unknown option");
});
