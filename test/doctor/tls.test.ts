import { afterAll, describe, expect, test } from "bun:test";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runDoctor } from "../../src/ops/doctor/doctor";
import { loadConfig } from "../../src/lib/config";
import { checkTlsCert } from "../../src/ops/doctor/tls";
import { ensureCa, hostIdentities, issueServerCert, tlsPaths } from "../../src/lib/net/tls-ca";
import { tempDir } from "../helpers/app";
import { configIn, fakeProbes } from "./fakes";

// Doctor's certificate line: ok, a warning 30 days before expiry, an error once expired or unreadable,
// each naming `appliance tls renew`. Real certificates from the local CA, with short validity.

const dir = tempDir();
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const DAY = 86_400_000;

const paths = tlsPaths(dir);
ensureCa(paths);
/** A server certificate valid `days` days from now, copied to its own file. */
function certFor(days: number): { file: string; notAfter: number } {
  const issued = issueServerCert(paths, hostIdentities([], "box", {}), { days });
  const file = join(dir, `server-${days}.crt`);
  writeFileSync(file, readFileSync(issued.cert));
  return { file, notAfter: Date.parse(issued.not_after) };
}
const readText = (p: string) => {
  try {
    return readFileSync(p, "utf8");
  } catch {
    return null;
  }
};

describe("the tls certificate check", () => {
  const long = certFor(397);
  const short = certFor(10);

  test("a certificate with more than 30 days left is ok and says how many", () => {
    const c = checkTlsCert(long.file, { readText });
    expect(c.status).toBe("ok");
    expect(c.detail).toMatch(new RegExp(`^${long.file} valid until \\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\dZ \\(396 days left\\)$`));
  });

  test("within 30 days of expiry it warns and says to renew", () => {
    const c = checkTlsCert(short.file, { readText });
    expect(c.status).toBe("warn");
    expect(c.detail).toContain("(9 days left)");
    expect(c.hint).toContain("run `appliance tls renew`");
    // The long one, seen 31 and 29 days before its end.
    expect(checkTlsCert(long.file, { readText }, long.notAfter - 31 * DAY).status).toBe("ok");
    expect(checkTlsCert(long.file, { readText }, long.notAfter - 29 * DAY).status).toBe("warn");
  });

  test("once expired it is an error", () => {
    const c = checkTlsCert(short.file, { readText }, short.notAfter + DAY);
    expect(c.status).toBe("fail");
    expect(c.detail).toContain("expired on");
    expect(c.hint).toContain("run `appliance tls renew`");
  });

  test("a file that cannot be read, or is no certificate, is an error", () => {
    const missing = checkTlsCert(join(dir, "nope.crt"), { readText });
    expect(missing.status).toBe("fail");
    expect(missing.detail).toBe(`cannot read ${join(dir, "nope.crt")}`);
    expect(missing.hint).toContain("appliance tls renew");
    writeFileSync(join(dir, "junk.crt"), "not a certificate");
    expect(checkTlsCert(join(dir, "junk.crt"), { readText }).status).toBe("fail");
  });

  test("a relative cert path is read from the config file's folder (loadConfig resolves it); no [server.tls], no path", () => {
    const etc = join(dir, "etc");
    mkdirSync(etc, { recursive: true });
    const file = join(etc, "config.toml");
    writeFileSync(file, `[server]\ndata_dir = ${JSON.stringify(dir)}\n`);
    expect(loadConfig({ file, env: {} }).config.server.tls).toBeUndefined();
    writeFileSync(file, `[server]\ndata_dir = ${JSON.stringify(dir)}\n[server.tls]\ncert = "tls/server.crt"\nkey = "tls/server.key"\n`);
    expect(loadConfig({ file, env: {} }).config.server.tls).toMatchObject({ cert: join(etc, "tls/server.crt"), key: join(etc, "tls/server.key") });
    writeFileSync(file, `[server]\ndata_dir = ${JSON.stringify(dir)}\n[server.tls]\ncert = "/abs/s.crt"\nkey = "k"\n`);
    expect(loadConfig({ file, env: {} }).config.server.tls!.cert).toBe("/abs/s.crt");
  });
});

describe("doctor with [server.tls]", () => {
  const config = configIn(dir);
  const run = (raw: Record<string, unknown>) => runDoctor(() => ({ config: config(raw), file: join(dir, "config.toml") }), fakeProbes({ readText }), () => []);

  test("a certificate about to expire is a warning line; doctor still passes", async () => {
    const { file } = certFor(5);
    const report = await run({ server: { tls: { cert: file, key: paths.key } } });
    const line = report.checks.find((c) => c.name === "tls certificate")!;
    expect(line.status).toBe("warn");
    expect(line.hint).toContain("appliance tls renew");
    expect(report.checks.filter((c) => c.status === "fail")).toEqual([]);
  });

  test("a missing certificate fails doctor; without [server.tls] there is no line", async () => {
    // as loadConfig hands it over: resolved against the config file's folder (tested above)
    const report = await run({ server: { tls: { cert: join(dir, "gone.crt"), key: join(dir, "gone.key") } } });
    expect(report.checks.find((c) => c.name === "tls certificate")!.detail).toBe(`cannot read ${join(dir, "gone.crt")}`);
    expect(report.ok).toBe(false);
    expect((await run({})).checks.some((c) => c.name === "tls certificate")).toBe(false);
  });
});
