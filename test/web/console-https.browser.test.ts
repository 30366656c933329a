import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { Browser } from "playwright-core";
import { validateConfig } from "../../src/lib/config";
import { SESSION_COOKIE } from "../../src/2-services/console/auth";
import { memoryLogger } from "../../src/lib/log";
import { startServer, type RunningServer } from "../../src/main";
import { launchChromium, adminPasswordOf, signIn } from "../helpers/browser";
import { tempDir } from "../helpers/app";
import { cli } from "../helpers/cli";

// The web console in a real browser (Debian's chromium, driven by playwright-core) against the
// real server over HTTPS, with the CA and certificate `appliance tls init` makes in a temp data
// dir. The browser trusts that CA the way a Linux user would make Chromium trust it: imported as
// a CA into the NSS database in $HOME/.pki/nssdb (certutil, from libnss3-tools; test/setup-browser.sh
// installs it). Chromium on Linux reads its trust anchors from that database only: a CA added to
// Debian's system store (update-ca-certificates) still gave ERR_CERT_AUTHORITY_INVALID here.
// Certificate errors are never ignored: a second browser with an empty HOME is refused.

const dir = tempDir("appliance-console-https-");
const trustingHome = join(dir, "home-trusting");
const bareHome = join(dir, "home-bare");
let server: RunningServer;
let trusting: Browser;
let untrusting: Browser;
let adminPassword = "";
let ca = "";

function certutil(args: string[]): void {
  if (!Bun.which("certutil")) throw new Error("certutil is missing: run test/setup-browser.sh (it installs libnss3-tools)");
  const r = Bun.spawnSync(["certutil", ...args], { stdout: "pipe", stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`certutil ${args.join(" ")}: ${r.stderr.toString()}`);
}

/** A browser whose NSS database (in `home`) holds `caFile` as a trusted CA for web sites, or nothing. */
function launch(home: string, caFile?: string): Promise<Browser> {
  mkdirSync(home, { recursive: true });
  if (caFile) {
    const db = `sql:${join(home, ".pki", "nssdb")}`;
    mkdirSync(join(home, ".pki", "nssdb"), { recursive: true });
    certutil(["-d", db, "-N", "--empty-password"]);
    // "C,,": a CA trusted to issue server certificates; no e-mail or code-signing trust.
    certutil(["-d", db, "-A", "-t", "C,,", "-n", "appliance-ca", "-i", caFile]);
  }
  return launchChromium({ env: { ...process.env, HOME: home } });
}

beforeAll(async () => {
  const init = cli(dir, ["tls", "init", "--json"]);
  expect(init.code).toBe(0);
  const j = init.json() as { ca: string; cert: string; key: string };
  ca = j.ca;
  const config = validateConfig({
    server: { data_dir: dir, port: 0, tls: { cert: j.cert, key: j.key } },
    engines: { device: "cpu", threads: 1 },
    rentals: { discover: false },
    models: [],
  });
  const banner: string[] = [];
  server = await startServer(config, { logger: memoryLogger(), banner: (l) => banner.push(l) });
  adminPassword = adminPasswordOf(banner);
  [trusting, untrusting] = await Promise.all([launch(trustingHome, ca), launch(bareHome)]);
}, 60_000);

afterAll(async () => {
  await Promise.all([trusting?.close(), untrusting?.close()]);
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** The certificate names localhost and 127.0.0.1; a browser is sent to the name, as people are. */
const url = (path: string) => `${server.url.replace("127.0.0.1", "localhost")}${path}`;

test("a browser that does not trust the CA is refused by its certificate check", async () => {
  const page = await untrusting.newPage();
  const error = await page.goto(url("/console")).then(
    () => "",
    (e: Error) => e.message,
  );
  expect(error).toMatch(/net::ERR_CERT_AUTHORITY_INVALID/);
  await page.close();
}, 15_000);

test("a browser trusting the CA signs in over https, gets a Secure HttpOnly session, creates a key and sees it listed", async () => {
  const context = await trusting.newContext({ viewport: { width: 1200, height: 900 } });
  const page = await context.newPage();
  const res = (await page.goto(url("/console")))!;
  expect(res.ok()).toBe(true);
  expect(res.url()).toStartWith("https://localhost:");
  expect(await page.evaluate(() => [location.protocol, window.isSecureContext])).toEqual(["https:", true]);
  expect(res.headers()["strict-transport-security"]).toBe("max-age=31536000");
  // What the browser saw of the connection: the certificate tls init issued, for this host.
  const security = (await res.securityDetails())!;
  expect(security.issuer).toStartWith("Appliance local CA");
  expect(security.protocol).toMatch(/^TLS 1\.[23]$/);

  await signIn(page, "admin", adminPassword);
  await page.locator("#keys-table").waitFor();

  const cookies = await context.cookies(url("/console"));
  const session = cookies.find((c) => c.name === SESSION_COOKIE);
  expect(session).toMatchObject({ secure: true, httpOnly: true, sameSite: "Strict", domain: "localhost", path: "/console" });

  await page.locator("#key-name").fill("https key");
  await page.getByRole("button", { name: "Create key" }).click();
  const shown = page.locator("#new-key");
  await shown.waitFor();
  const key = ((await shown.inputValue().catch(() => null)) ?? (await shown.textContent()) ?? "").trim();
  expect(key).toMatch(/^sk-apl-[0-9A-Za-z]{44}$/);
  const id = (await server.deps.accounts.authenticate(key))!.keyId;
  const row = page.locator(`#keys-table tr[data-key-id="${id}"]`);
  await row.waitFor();
  expect(await row.textContent()).toContain("https key");
  await context.close();
}, 20_000);
