import { sqliteAccountStore } from "../../src/4-store/accounts";
import { afterAll, describe, expect, test } from "bun:test";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createAccountService } from "../../src/2-services/accounts/service";
import { systemClock } from "../../src/lib/clock";
import { validateConfig } from "../../src/lib/config";
import { openStore } from "../../src/4-store/db";
import { tempDir } from "../helpers/app";
import { cli } from "../helpers/cli";

const dir = tempDir();
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const run = (...args: string[]) => cli(dir, args);

async function authenticate(key: string) {
  const db = openStore(dir);
  try {
    return await createAccountService(sqliteAccountStore(db), validateConfig({}).limits, systemClock).authenticate(key);
  } finally {
    db.close();
  }
}

test("--version prints the version", () => {
  const r = run("--version");
  expect(r.code).toBe(0);
  expect(r.stdout.trim()).toMatch(/^\d+\.\d+\.\d+$/);
});

describe("accounts and keys on a data dir where no server ever ran", () => {
  test("accounts create prints the account; --json for scripts", () => {
    const r = run("accounts", "create", "team", "--credit", "12.5", "--json");
    expect(r.code).toBe(0);
    expect(r.json()).toMatchObject({ name: "team", balance_micros: 12_500_000, trial_tokens_remaining: 250_000 });
    const human = run("accounts", "create", "solo");
    expect(human.stdout).toContain("account solo");
    expect(human.stdout).toContain("$0.00");
  });

  test("keys create --json includes the full key once, and the key works", async () => {
    const r = run("keys", "create", "--account", "team", "--json");
    expect(r.code).toBe(0);
    const out = r.json();
    expect(out.key).toMatch(/^sk-apl-[0-9A-Za-z]{44}$/);
    expect(out).toMatchObject({ kind: "free", scopes: ["inference"], account: "team" });
    expect(await authenticate(out.key)).toMatchObject({ kind: "free", accountName: "team" });
  });

  test("a second free key is refused with a clear message and a non-zero exit", () => {
    const r = run("keys", "create", "--account", "team");
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("already has its free key");
    expect(r.stderr).not.toContain("    at "); // no stack trace for a user error
  });

  test("premium keys with the rental scope, then list shows prefix and last 4 only", () => {
    const made = run("keys", "create", "--account", "team", "--premium", "--scope", "rental", "--rpm", "60", "--json").json();
    expect(made).toMatchObject({ kind: "premium", scopes: ["inference", "rental"], rpm_limit: 60 });
    const list = run("keys", "list", "--account", "team");
    expect(list.code).toBe(0);
    expect(list.stdout).toContain(made.display);
    expect(list.stdout).not.toContain(made.key.slice(7, 20));
    const json = run("keys", "list", "--json").json();
    expect(json.map((k: any) => k.id)).toContain(made.id);
    expect(JSON.stringify(json)).not.toContain(made.key);
  });

  test("scope, set, rotate and revoke", async () => {
    const made = run("keys", "create", "--account", "solo", "--premium", "--json").json();
    expect(run("keys", "scope", made.id, "rental", "on", "--json").json().scopes).toEqual(["inference", "rental"]);
    expect(run("keys", "set", made.id, "--max-active-rentals", "4", "--inflight", "2", "--json").json()).toMatchObject({ max_active_rentals: 4, inflight_limit: 2 });
    const rotated = run("keys", "rotate", made.id, "--json").json();
    expect(rotated).toMatchObject({ revoked: made.id, scopes: ["inference", "rental"], max_active_rentals: 4, inflight_limit: 2 });
    expect(await authenticate(made.key)).toBeNull();
    expect(await authenticate(rotated.key)).not.toBeNull();
    expect(run("keys", "revoke", rotated.key).code).toBe(0);
    expect(await authenticate(rotated.key)).toBeNull();
    expect(run("keys", "list", "--account", "solo").stdout).toBe("(none)\n");
    expect(run("keys", "list", "--account", "solo", "--all").stdout).toContain("revoked");
  });

  test("accounts credit and list", () => {
    expect(run("accounts", "credit", "solo", "3.25", "--json").json().balance_micros).toBe(3_250_000);
    const list = run("accounts", "list");
    expect(list.stdout).toContain("solo");
    expect(list.stdout).toContain("$3.25");
  });

  test("bad input exits non-zero with one clear line", () => {
    for (const [args, message] of [
      [["accounts", "credit", "solo", "lots"], "not a dollar amount"],
      [["accounts", "credit", "nobody", "1"], "account not found: nobody"],
      [["keys", "scope", "key_nope", "rental", "on"], "key not found"],
      [["keys", "create", "--account", "solo", "--premium", "--rpm", "fast"], "--rpm must be a whole number"],
      [["keys", "create", "--account", "solo", "--premium", "--scope", "root"], 'unknown scope "root"'],
    ] as const) {
      const r = run(...args);
      expect(r.code).not.toBe(0);
      expect(r.stderr).toContain(message);
    }
  });
});

describe("config check", () => {
  test("passes on the defaults and names the bad field otherwise", () => {
    const ok = run("config", "check");
    expect(ok.code).toBe(0);
    expect(ok.stdout).toContain("config ok (built-in defaults, no file)");
    const bad = join(dir, "bad.toml");
    writeFileSync(bad, "[server]\nport = -1\n");
    const r = run("--config", bad, "config", "check");
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("server.port");
  });

  test("reports a model file that does not exist", () => {
    const file = join(dir, "models.toml");
    writeFileSync(file, `[[models]]\nid = "m"\nname = "M"\nkind = "chat"\nfiles = { model = "missing.gguf" }\nmax_context = 4096\n`);
    const r = run("--config", file, "config", "check");
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("models[0].files.model: file not found");
  });

  test("reports a model file whose GGUF header does not hold together (issue 41: 2^63 key-value pairs)", () => {
    const gguf = join(dir, "corrupt.gguf");
    const bytes = new Uint8Array(24);
    const v = new DataView(bytes.buffer);
    bytes.set(new TextEncoder().encode("GGUF"), 0);
    v.setUint32(4, 3, true);
    v.setBigUint64(8, 0n, true);
    v.setBigUint64(16, 1n << 63n, true);
    writeFileSync(gguf, bytes);
    const file = join(dir, "corrupt.toml");
    writeFileSync(file, `[[models]]\nid = "m"\nname = "M"\nkind = "chat"\nfiles = { model = "${gguf}" }\nmax_context = 4096\n`);
    const r = run("--config", file, "config", "check");
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("models[0].files.model");
    expect(r.stderr).toContain("too_many_kvs");
  });

  test("--json prints the effective configuration", () => {
    const r = run("config", "check", "--json", "--data-dir", join(dir, "elsewhere"));
    expect(r.json().config.server.data_dir).toBe(join(dir, "elsewhere"));
  });
});
