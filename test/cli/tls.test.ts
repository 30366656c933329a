import { afterAll, describe, expect, test } from "bun:test";
import { X509Certificate } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import { tempDir } from "../helpers/app";
import { cli } from "../helpers/cli";

// `appliance tls init|renew|status` in a child process, on a temp data dir, with the real openssl.

const root = tempDir();
afterAll(() => rmSync(root, { recursive: true, force: true }));

function fresh(name: string): string {
  const d = join(root, name);
  mkdirSync(d, { recursive: true });
  return d;
}

describe("tls init", () => {
  const dir = fresh("init");
  const cfg = join(dir, "no-config", "appliance", "config.toml");
  const first = cli(dir, ["tls", "init", "--name", "gpu.example.org", "--name", "10.1.2.3", "--json"]);

  test("makes the CA and a server certificate for this host, the extra names and loopback, keys 0600", () => {
    expect(first.stderr).toBe("");
    expect(first.code).toBe(0);
    const r = first.json();
    expect(r.ca).toBe(join(dir, "tls", "ca.crt"));
    expect(r.cert).toBe(join(dir, "tls", "server.crt"));
    expect(r.key).toBe(join(dir, "tls", "server.key"));
    const host = hostname().toLowerCase();
    expect(r.names).toEqual(expect.arrayContaining([host, `${host.split(".")[0]}.local`, "localhost", "gpu.example.org"]));
    expect(r.addresses).toEqual(expect.arrayContaining(["127.0.0.1", "::1", "10.1.2.3"]));
    const leaf = new X509Certificate(readFileSync(r.cert));
    const ca = new X509Certificate(readFileSync(r.ca));
    expect(r.fingerprint_sha256).toBe(ca.fingerprint256);
    expect(r.not_after).toBe(new Date(leaf.validTo).toISOString());
    expect(leaf.checkHost("gpu.example.org")).toBe("gpu.example.org");
    expect(leaf.checkIP("10.1.2.3")).toBe("10.1.2.3");
    expect(leaf.verify(ca.publicKey)).toBe(true);
    expect(Bun.spawnSync(["openssl", "verify", "-CAfile", r.ca, r.cert]).exitCode).toBe(0);
    expect(statSync(join(dir, "tls", "ca.key")).mode & 0o777).toBe(0o600);
    expect(statSync(r.key).mode & 0o777).toBe(0o600);
  });

  test("writes [server.tls] into the config file the CLI reads (created when there was none)", () => {
    const parsed = Bun.TOML.parse(readFileSync(cfg, "utf8")) as any;
    expect(parsed.server.tls).toEqual({ cert: join(dir, "tls", "server.crt"), key: join(dir, "tls", "server.key") });
    expect(cli(dir, ["config", "check"]).code).toBe(0);
  });

  test("prints the fingerprint and how Node, Python, curl and browsers trust the CA", () => {
    const again = cli(dir, ["tls", "init"]);
    expect(again.code).toBe(0);
    const ca = join(dir, "tls", "ca.crt");
    expect(again.stdout).toContain(`kept the existing CA in ${join(dir, "tls")}`);
    expect(again.stdout).toContain(`CA SHA-256 fingerprint: ${first.json().fingerprint_sha256}`);
    expect(again.stdout).toContain(`NODE_EXTRA_CA_CERTS=${ca}`);
    expect(again.stdout).toContain(`SSL_CERT_FILE=${ca} REQUESTS_CA_BUNDLE=${ca}`);
    expect(again.stdout).toContain(`curl --cacert ${ca} https://`);
    expect(again.stdout).toMatch(/Browser: import ca\.crt/);
    expect(again.stdout).toContain("https://localhost:8484/");
    expect(again.stdout).toContain("https://[::1]:8484/");
  });

  test("re-running keeps the CA and makes a new server certificate; --force replaces the CA", () => {
    const caBefore = readFileSync(join(dir, "tls", "ca.crt"), "utf8");
    const a = cli(dir, ["tls", "init", "--json"]).json();
    expect(readFileSync(join(dir, "tls", "ca.crt"), "utf8")).toBe(caBefore);
    expect(a.fingerprint_sha256).toBe(first.json().fingerprint_sha256);
    expect(a.serial).not.toBe(first.json().serial);
    const forced = cli(dir, ["tls", "init", "--force", "--json"]);
    expect(forced.code).toBe(0);
    expect(forced.json().fingerprint_sha256).not.toBe(first.json().fingerprint_sha256);
    const leaf = new X509Certificate(readFileSync(join(dir, "tls", "server.crt")));
    expect(leaf.verify(new X509Certificate(readFileSync(join(dir, "tls", "ca.crt"))).publicKey)).toBe(true);
  });

  test("an existing config keeps its comments and other tables; a bad --name is refused", () => {
    const d = fresh("commented");
    const file = join(d, "appliance.toml");
    const text = `# my box\n[server]\nport = 9443 # HTTPS here\n\n# generous limits\n[limits]\nfree_rpm = 60\n`;
    writeFileSync(file, text);
    const r = cli(d, ["tls", "init"], { APPLIANCE_CONFIG: file });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("https://localhost:9443/");
    expect(readFileSync(file, "utf8")).toBe(`${text}\n[server.tls]\ncert = "${join(d, "tls", "server.crt")}"\nkey = "${join(d, "tls", "server.key")}"\n`);
    const bad = cli(d, ["tls", "init", "--name", "not a name"], { APPLIANCE_CONFIG: file });
    expect(bad.code).toBe(1);
    expect(bad.stderr).toBe('error: not a host name or IP address: "not a name"\n');
  });
});

describe("tls renew and status", () => {
  test("renew refuses without a CA", () => {
    const d = fresh("no-ca");
    const r = cli(d, ["tls", "renew"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`no local CA in ${join(d, "tls")}: run \`appliance tls init\` first`);
    expect(existsSync(join(d, "tls", "server.crt"))).toBe(false);
  });

  test("renew makes a new serial from the same CA with the same names, adds --name, and says SIGHUP", () => {
    const d = fresh("renew");
    const init = cli(d, ["tls", "init", "--name", "a.test", "--json"]).json();
    const caBefore = readFileSync(init.ca, "utf8");
    const r = cli(d, ["tls", "renew"]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("a running server picks it up on SIGHUP: kill -HUP <server pid>");
    expect(r.stdout).toMatch(/valid until \d{4}-\d\d-\d\dT/);
    const renewed = cli(d, ["tls", "renew", "--name", "b.test", "--json"]).json();
    expect(readFileSync(init.ca, "utf8")).toBe(caBefore);
    expect(renewed.fingerprint_sha256).toBe(init.fingerprint_sha256);
    expect(renewed.serial).not.toBe(init.serial);
    expect(renewed.names).toEqual([...init.names, "b.test"]);
    expect(renewed.addresses).toEqual(init.addresses);
    const leaf = new X509Certificate(readFileSync(init.cert));
    expect(leaf.serialNumber).toBe(renewed.serial);
    expect(leaf.verify(new X509Certificate(caBefore).publicKey)).toBe(true);
  });

  test("status prints the configured certificate, its names, expiry and days left", () => {
    const d = fresh("status");
    cli(d, ["tls", "init", "--days", "20"]);
    const s = cli(d, ["tls", "status"]);
    expect(s.code).toBe(0);
    expect(s.stdout).toContain(`certificate: ${join(d, "tls", "server.crt")}\n`);
    expect(s.stdout).toContain("localhost");
    expect(s.stdout).toMatch(/valid until \S+ \(19 days left\)/);
    expect(s.stdout).toContain("run `appliance tls renew`");
    const j = cli(d, ["tls", "status", "--json"]).json();
    expect(j.days_left).toBe(19);
    expect(j.configured).toBe(true);
  });
});
