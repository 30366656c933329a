import { randomBytes, X509Certificate } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { isIP } from "node:net";
import { hostname, networkInterfaces, tmpdir } from "node:os";
import { join } from "node:path";

// A local certificate authority for `appliance tls init|renew`: the CA and the server certificate
// are made by the system's openssl (EC P-256), never by hand-written DER, and read back with
// node:crypto's X509Certificate. Everything lives in <data_dir>/tls; private keys are mode 0600.

/** A failure the operator can fix (the CLI's fail() prints "UsageError"s as one line, no stack). */
export class TlsError extends Error {
  override name = "UsageError";
}

/** 10 years: the CA outlives every server certificate it signs. */
export const CA_DAYS = 3650;
/** Browsers refuse server certificates valid longer than 398 days (CA/Browser Forum BR 6.3.2); 397 stays clear of it. */
export const LEAF_DAYS = 397;

export interface TlsPaths {
  dir: string;
  caKey: string;
  caCert: string;
  key: string;
  cert: string;
}

export function tlsPaths(dataDir: string): TlsPaths {
  const dir = join(dataDir, "tls");
  return { dir, caKey: join(dir, "ca.key"), caCert: join(dir, "ca.crt"), key: join(dir, "server.key"), cert: join(dir, "server.crt") };
}

export interface Identities {
  /** DNS names, in the order given, without duplicates. */
  names: string[];
  /** IPv4 and IPv6 addresses in plain form. */
  addresses: string[];
}

type Interfaces = ReturnType<typeof networkInterfaces>;

/**
 * What clients on the LAN call this host: its hostname, its mDNS name (`<first label>.local`), every
 * non-internal address, loopback, and the extra names or addresses given.
 */
export function hostIdentities(extra: string[] = [], host = hostname(), ifaces: Interfaces = networkInterfaces()): Identities {
  const out: Identities = { names: [], addresses: [] };
  const label = host.split(".")[0]!;
  const lan = Object.values(ifaces)
    .flatMap((list) => list ?? [])
    .filter((i) => !i.internal)
    .map((i) => i.address);
  for (const v of [host, label ? `${label}.local` : "", ...lan, "localhost", "127.0.0.1", "::1", ...extra]) addIdentity(out, v);
  return out;
}

/** Adds a name or an address (IPv6 may be bracketed; a zone id is dropped) unless already there. */
export function addIdentity(to: Identities, value: string): void {
  let v = value.trim();
  if (!v) return;
  if (v.startsWith("[") && v.endsWith("]")) v = v.slice(1, -1);
  const bare = v.split("%")[0]!;
  if (isIP(bare)) {
    const plain = isIP(bare) === 6 ? new URL(`http://[${bare}]/`).hostname.slice(1, -1) : bare;
    if (!to.addresses.includes(plain)) to.addresses.push(plain);
    return;
  }
  const name = v.toLowerCase().replace(/\.$/, "");
  if (!/^(\*\.)?[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*$/.test(name)) throw new TlsError(`not a host name or IP address: "${value}"`);
  if (!to.names.includes(name)) to.names.push(name);
}

export interface CertInfo {
  names: string[];
  addresses: string[];
  /** ISO 8601. */
  not_after: string;
  not_before: string;
  serial: string;
  fingerprint_sha256: string;
  subject: string;
  issuer: string;
}

/** The first certificate of a PEM (a chain's leaf), read back. */
export function readCert(pem: string | Buffer): CertInfo {
  const x = new X509Certificate(pem);
  const ids: Identities = { names: [], addresses: [] };
  for (const part of (x.subjectAltName ?? "").split(/,\s*/)) {
    const m = /^(DNS|IP Address):(.*)$/.exec(part.trim());
    if (m?.[1] === "DNS") ids.names.push(m[2]!);
    else if (m) addIdentity(ids, m[2]!);
  }
  return {
    ...ids,
    not_after: new Date(x.validTo).toISOString(),
    not_before: new Date(x.validFrom).toISOString(),
    serial: x.serialNumber,
    fingerprint_sha256: x.fingerprint256,
    subject: x.subject,
    issuer: x.issuer,
  };
}

/** Runs openssl; its stdout, or a TlsError carrying its stderr. */
export function openssl(args: string[], stdin?: string): string {
  let r;
  try {
    r = Bun.spawnSync(["openssl", ...args], { stdin: stdin === undefined ? "ignore" : Buffer.from(stdin), stdout: "pipe", stderr: "pipe" });
  } catch (e) {
    throw new TlsError(`cannot run openssl (is it installed? apt install openssl): ${(e as Error).message}`);
  }
  if (r.exitCode !== 0) throw new TlsError(`openssl ${args[0]} failed: ${r.stderr.toString().trim()}`);
  return r.stdout.toString();
}

/** Writes through a temp file and a rename, so a reader never sees half a key; keys get mode 0600. */
function writeAtomic(path: string, text: string, mode: number): void {
  const temp = `${path}.${process.pid}.tmp`;
  writeFileSync(temp, text, { mode });
  chmodSync(temp, mode);
  renameSync(temp, path);
}

function newKey(): string {
  return openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]);
}

/** A positive 128-bit serial (RFC 5280 4.1.2.2: at most 20 octets, positive; browsers want ≥ 64 random bits). */
function newSerial(): string {
  const b = randomBytes(16);
  b[0] = (b[0]! & 0x7f) | 0x01;
  return `0x${b.toString("hex")}`;
}

/** A scratch folder for CSRs and extension files, removed afterwards. */
function withScratch<T>(fn: (dir: string) => T): T {
  const dir = mkdtempSync(join(tmpdir(), "appliance-tls-"));
  try {
    return fn(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The CN for the CA: says whose it is, so an operator recognises it in a trust store. */
function caCommonName(host: string): string {
  return `Appliance local CA (${host.replace(/[/\\=+,]/g, "_")})`.slice(0, 64);
}

/** Makes the CA unless one exists (`force` replaces it). Returns whether a new one was made. */
export function ensureCa(paths: TlsPaths, o: { force?: boolean; host?: string; days?: number } = {}): boolean {
  if (existsSync(paths.caCert) || existsSync(paths.caKey)) {
    if (!o.force) return false;
  }
  mkdirSync(paths.dir, { recursive: true, mode: 0o700 });
  const key = newKey();
  const cert = withScratch((dir) => {
    const keyFile = join(dir, "ca.key");
    writeFileSync(keyFile, key, { mode: 0o600 });
    const cnf = join(dir, "ca.cnf");
    // Our own config, so the system openssl.cnf's default extensions cannot add or duplicate any.
    writeFileSync(
      cnf,
      [
        "[req]",
        "distinguished_name = dn",
        "prompt = no",
        "x509_extensions = ca",
        "[dn]",
        `CN = ${caCommonName(o.host ?? hostname())}`,
        "O = Appliance",
        "[ca]",
        "basicConstraints = critical, CA:TRUE",
        "keyUsage = critical, keyCertSign, cRLSign",
        "subjectKeyIdentifier = hash",
        "",
      ].join("\n"),
    );
    return openssl(["req", "-x509", "-new", "-config", cnf, "-key", keyFile, "-sha256", "-days", String(o.days ?? CA_DAYS), "-set_serial", newSerial()]);
  });
  writeAtomic(paths.caKey, key, 0o600);
  writeAtomic(paths.caCert, cert, 0o644);
  return true;
}

export interface Issued extends CertInfo {
  ca: string;
  cert: string;
  key: string;
  ca_fingerprint_sha256: string;
}

/**
 * A new server key and certificate signed by the CA, for `ids`; server.crt holds the leaf then the
 * CA (a chain), so clients that trust the CA can build the path from what the server sends.
 */
export function issueServerCert(paths: TlsPaths, ids: Identities, o: { days?: number } = {}): Issued {
  if (!existsSync(paths.caCert) || !existsSync(paths.caKey)) throw new TlsError(`no local CA in ${paths.dir}: run \`appliance tls init\` first`);
  if (!ids.names.length && !ids.addresses.length) throw new TlsError("a server certificate needs at least one name or address");
  const caPem = readFileSync(paths.caCert, "utf8");
  const key = newKey();
  const leaf = withScratch((dir) => {
    const keyFile = join(dir, "server.key");
    writeFileSync(keyFile, key, { mode: 0o600 });
    const cnf = join(dir, "leaf.cnf");
    const san = [...ids.names.map((n) => `DNS:${n}`), ...ids.addresses.map((a) => `IP:${a}`)].join(", ");
    writeFileSync(
      cnf,
      [
        "[req]",
        "distinguished_name = dn",
        "prompt = no",
        "[dn]",
        `CN = ${(ids.names[0] ?? ids.addresses[0]!).slice(0, 64)}`,
        "[leaf]",
        "basicConstraints = critical, CA:FALSE",
        "keyUsage = critical, digitalSignature",
        "extendedKeyUsage = serverAuth",
        `subjectAltName = ${san}`,
        "subjectKeyIdentifier = hash",
        "authorityKeyIdentifier = keyid, issuer",
        "",
      ].join("\n"),
    );
    const csr = openssl(["req", "-new", "-config", cnf, "-key", keyFile, "-sha256"]);
    return openssl(
      ["x509", "-req", "-CA", paths.caCert, "-CAkey", paths.caKey, "-set_serial", newSerial(), "-days", String(o.days ?? LEAF_DAYS), "-sha256", "-extfile", cnf, "-extensions", "leaf"],
      csr,
    );
  });
  const x = new X509Certificate(leaf);
  const ca = new X509Certificate(caPem);
  if (!x.verify(ca.publicKey) || !x.checkIssued(ca)) throw new TlsError("openssl made a certificate the CA does not verify");
  // The key first: a server reloading on SIGHUP between the two renames reads a pair that may not
  // match and keeps its old one (and a rename never leaves half a file).
  writeAtomic(paths.key, key, 0o600);
  writeAtomic(paths.cert, leaf.trimEnd() + "\n" + caPem.trimEnd() + "\n", 0o644);
  return { ...readCert(leaf), ca: paths.caCert, cert: paths.cert, key: paths.key, ca_fingerprint_sha256: ca.fingerprint256 };
}

/** Whole days from `now` until `notAfter` (negative once expired). */
export function daysLeft(notAfter: string, now = Date.now()): number {
  return Math.floor((Date.parse(notAfter) - now) / 86_400_000);
}
