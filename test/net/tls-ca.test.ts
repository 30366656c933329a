import { afterAll, describe, expect, test } from "bun:test";
import { X509Certificate } from "node:crypto";
import { readFileSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import { ensureCa, hostIdentities, issueServerCert, readCert, tlsPaths, TlsError } from "../../src/lib/net/tls-ca";
import { tempDir } from "../helpers/app";

// The local CA made by the system's openssl, read back with node:crypto, and served by a real Bun
// TLS server that a client trusting only this CA reaches and a client without it is refused by.

const dir = tempDir();
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const paths = tlsPaths(dir);

const IFACES = {
  lo: [{ address: "127.0.0.1", netmask: "255.0.0.0", family: "IPv4", mac: "00:00:00:00:00:00", internal: true, cidr: "127.0.0.1/8" }],
  eth0: [
    { address: "192.168.1.20", netmask: "255.255.255.0", family: "IPv4", mac: "02:00:00:00:00:01", internal: false, cidr: "192.168.1.20/24" },
    { address: "fe80::1", netmask: "ffff:ffff:ffff:ffff::", family: "IPv6", mac: "02:00:00:00:00:01", internal: false, cidr: "fe80::1/64", scopeid: 2 },
  ],
} as unknown as ReturnType<typeof import("node:os").networkInterfaces>;

async function curl(args: string[]): Promise<{ code: number; out: string }> {
  const p = Bun.spawn(["curl", "-sS", "--max-time", "10", ...args], { stdout: "pipe", stderr: "ignore" });
  const out = await new Response(p.stdout).text();
  return { code: await p.exited, out };
}

describe("the host's names and addresses", () => {
  test("hostname, its .local name, LAN addresses, loopback and extra names, without duplicates", () => {
    const ids = hostIdentities(["gpu.example.org", "[FD00::0:7]", "192.168.1.20", "10.0.0.9"], "gpubox.lan", IFACES);
    expect(ids.names).toEqual(["gpubox.lan", "gpubox.local", "localhost", "gpu.example.org"]);
    expect(ids.addresses).toEqual(["192.168.1.20", "fe80::1", "127.0.0.1", "::1", "fd00::7", "10.0.0.9"]);
  });

  test("a --name that is neither a host name nor an address is refused", () => {
    expect(() => hostIdentities(["bad name"], "h", {})).toThrow(TlsError);
    expect(() => hostIdentities(["a/b"], "h", {})).toThrow('not a host name or IP address: "a/b"');
  });
});

describe("a CA and a server certificate from openssl", () => {
  const ids = hostIdentities(["api.test"], "gpubox", IFACES);
  expect(ensureCa(paths, { host: "gpubox" })).toBe(true);
  const issued = issueServerCert(paths, ids);
  const ca = new X509Certificate(readFileSync(paths.caCert));
  const chain = readFileSync(paths.cert, "utf8");
  const leaf = new X509Certificate(chain);

  test("the CA is a CA for ten years, signing certificates and CRLs only", () => {
    expect(ca.ca).toBe(true);
    expect(ca.checkIssued(ca)).toBe(true);
    const years = (Date.parse(ca.validTo) - Date.parse(ca.validFrom)) / (365 * 86_400_000);
    expect(years).toBeGreaterThan(9.9);
    const text = Bun.spawnSync(["openssl", "x509", "-noout", "-text", "-in", paths.caCert]).stdout.toString();
    expect(text).toMatch(/Basic Constraints: critical\s+CA:TRUE/);
    expect(text).toMatch(/Key Usage: critical\s+Certificate Sign, CRL Sign/);
    expect(text).toContain("ASN1 OID: prime256v1");
  });

  test("the leaf names every name and address, is valid 397 days, serves TLS and is no CA", () => {
    expect(leaf.ca).toBe(false);
    expect(readCert(chain).names).toEqual(["gpubox", "gpubox.local", "localhost", "api.test"]);
    expect(readCert(chain).addresses).toEqual(["192.168.1.20", "fe80::1", "127.0.0.1", "::1"]);
    expect(leaf.checkHost("api.test")).toBe("api.test");
    expect(leaf.checkIP("::1")).toBe("::1");
    expect((Date.parse(leaf.validTo) - Date.parse(leaf.validFrom)) / 86_400_000).toBe(397);
    const text = Bun.spawnSync(["openssl", "x509", "-noout", "-text", "-in", paths.cert]).stdout.toString();
    expect(text).toMatch(/Basic Constraints: critical\s+CA:FALSE/);
    expect(text).toMatch(/Extended Key Usage:\s+TLS Web Server Authentication/);
    expect(text).toContain("X509v3 Authority Key Identifier");
    expect(issued.not_after).toBe(new Date(leaf.validTo).toISOString());
    expect(issued.ca_fingerprint_sha256).toBe(ca.fingerprint256);
  });

  test("server.crt is the leaf then the CA, and the leaf verifies against the CA (node:crypto and openssl verify)", () => {
    const certs = chain.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g)!;
    expect(certs).toHaveLength(2);
    expect(new X509Certificate(certs[1]!).fingerprint256).toBe(ca.fingerprint256);
    expect(leaf.verify(ca.publicKey)).toBe(true);
    expect(leaf.checkIssued(ca)).toBe(true);
    const v = Bun.spawnSync(["openssl", "verify", "-CAfile", paths.caCert, paths.cert]);
    expect(v.stdout.toString().trim()).toBe(`${paths.cert}: OK`);
  });

  test("the private keys are mode 0600", () => {
    expect(statSync(paths.caKey).mode & 0o777).toBe(0o600);
    expect(statSync(paths.key).mode & 0o777).toBe(0o600);
  });

  test("an existing CA is kept, and replaced only when forced", () => {
    const before = readFileSync(paths.caCert, "utf8");
    expect(ensureCa(paths)).toBe(false);
    expect(readFileSync(paths.caCert, "utf8")).toBe(before);
    const other = tlsPaths(join(dir, "forced"));
    ensureCa(other);
    const first = new X509Certificate(readFileSync(other.caCert)).fingerprint256;
    expect(ensureCa(other, { force: true })).toBe(true);
    expect(new X509Certificate(readFileSync(other.caCert)).fingerprint256).not.toBe(first);
    expect(statSync(other.caKey).mode & 0o777).toBe(0o600);
  });

  test("a Bun TLS server with the certificate is reached by clients trusting the CA, and refused by those that do not", async () => {
    const server = Bun.serve({ port: 0, hostname: "127.0.0.1", tls: { cert: chain, key: readFileSync(paths.key, "utf8") }, fetch: () => new Response("hello over tls") });
    try {
      const caPem = readFileSync(paths.caCert, "utf8");
      for (const host of ["localhost", "127.0.0.1"]) {
        const url = `https://${host}:${server.port}/`;
        expect(await (await fetch(url, { tls: { ca: caPem } })).text()).toBe("hello over tls");
        const refused = await fetch(url).then(
          () => null,
          (e: Error) => e,
        );
        expect(refused).toBeInstanceOf(Error);
        expect(String((refused as { code?: string }).code ?? refused!.message)).toMatch(/CERT|certificate|UNABLE_TO_GET_ISSUER/i);
        // curl in a child: the server runs on this process's event loop, so no spawnSync here.
        expect(await curl(["--cacert", paths.caCert, url])).toEqual({ code: 0, out: "hello over tls" });
        expect((await curl([url])).code).toBe(60); // CURLE_PEER_FAILED_VERIFICATION
      }
    } finally {
      server.stop(true);
    }
  });

  test("a server certificate needs the CA", () => {
    const other = tlsPaths(join(dir, "elsewhere"));
    expect(() => issueServerCert(other, ids)).toThrow("no local CA");
  });
});
