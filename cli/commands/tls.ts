import { Command } from "commander";
import { existsSync, readFileSync } from "node:fs";
import { type Config } from "../../src/lib/config";
import { configTarget, replaceConfigFile, targetConfig, type ConfigTarget } from "../config-file";
import { addIdentity, daysLeft, ensureCa, hostIdentities, issueServerCert, readCert, tlsPaths, TlsError, type Identities, type Issued } from "../../src/lib/net/tls-ca";
import { withTlsTable } from "../../src/lib/net/tls-config";
import { globals, intOption } from "../context";
import { runningServerPid } from "../../src/4-store/lock";
import { emit, fail } from "../output";

// `appliance tls init|renew|status`: HTTPS that works the first time on a LAN with no CA and no
// reverse proxy. A local CA in <data_dir>/tls signs a server certificate for this host's names and
// addresses; clients trust the CA once, and renewals need nothing more from them.

interface TlsOptions {
  name?: string[];
  force?: boolean;
  json?: boolean;
  days?: number;
}

const collect = (v: string, prev: string[] = []) => [...prev, v];

/** The config file the CLI reads, else the default path (created by init). */
function load(c: Command): { config: Config; target: ConfigTarget } {
  const target = configTarget(globals(c).config);
  return { config: targetConfig(target, globals(c).dataDir), target };
}

/** [server.tls] cert and key set in the config file; the edited text must load before it replaces the old. */
function writeConfig(c: Command, target: ConfigTarget, paths: { cert: string; key: string }): void {
  const text = target.exists ? readFileSync(target.file, "utf8") : "# appliance config, written by `appliance tls init`\n";
  replaceConfigFile(target, withTlsTable(text, paths, target.file), globals(c).dataDir);
}

function identities(extra: string[] | undefined, from?: Identities): Identities {
  if (!from) return hostIdentities(extra ?? []);
  const ids: Identities = { names: [...from.names], addresses: [...from.addresses] };
  for (const v of extra ?? []) addIdentity(ids, v);
  return ids;
}

function urls(config: Config, ids: Identities): string[] {
  const port = config.server.port;
  const p = port === 443 ? "" : `:${port}`;
  const host = (h: string) => (h.includes(":") ? `[${h}]` : h);
  // A link-local address needs a zone id no URL carries well; skip it.
  return [...ids.names.filter((n) => !n.startsWith("*.")), ...ids.addresses.filter((a) => !/^fe[89ab]/i.test(a))].map((h) => `https://${host(h)}${p}/`);
}

function trustHelp(ca: string, fingerprint: string, config: Config, ids: Identities): string[] {
  const u = urls(config, ids);
  return [
    `CA certificate: ${ca}`,
    `CA SHA-256 fingerprint: ${fingerprint}`,
    "  (compare it when you copy ca.crt to another machine)",
    "",
    "Trust the CA on each client machine (copy ca.crt there first):",
    `  Node (openai, @anthropic-ai/sdk):  export NODE_EXTRA_CA_CERTS=${ca}`,
    `  Python (openai, anthropic, requests, httpx):  export SSL_CERT_FILE=${ca} REQUESTS_CA_BUNDLE=${ca}`,
    `  curl:  curl --cacert ${ca} ${u[0] ?? "https://HOST/"}health`,
    "  Browser: import ca.crt as a trusted certificate authority",
    `    Chrome/Chromium on Linux (its own store, per user; certutil is in libnss3-tools): certutil -d sql:$HOME/.pki/nssdb -A -t "C,," -n appliance-ca -i ${ca}`,
    "    Debian/Ubuntu system store (curl, Python, Go; not Chrome): sudo cp ca.crt /usr/local/share/ca-certificates/appliance.crt && sudo update-ca-certificates",
    "    macOS: sudo security add-trusted-cert -d -r trustRoot -k /Library/Keychains/System.keychain ca.crt",
    "    Windows: certutil -addstore -f ROOT ca.crt",
    "    Firefox: Settings → Privacy & Security → Certificates → View Certificates → Authorities → Import",
    "",
    "The server answers on:",
    ...u.map((x) => `  ${x}`),
  ];
}

export function tlsCommand(): Command {
  const cmd = new Command("tls").description("HTTPS with a local certificate authority kept in the data dir");
  const days = (c: Command) => c.option("--days <n>", "server certificate validity in days (default 397, browsers' limit)", intOption("--days"));

  days(
    cmd
      .command("init")
      .description("make a local CA (kept) and a server certificate for this host's names and addresses, and set [server.tls] in the config")
      .option("--name <name>", "another DNS name or IP address for the certificate (repeatable)", collect)
      .option("--force", "replace an existing CA (every client must trust the new one)")
      .option("--json", "print {ca, cert, key, fingerprint_sha256, names, addresses, not_after} as JSON"),
  ).action((opts: TlsOptions, c: Command) => {
    try {
      const { config, target } = load(c);
      const paths = tlsPaths(config.server.data_dir);
      const made = ensureCa(paths, { force: opts.force });
      const issued = issueServerCert(paths, identities(opts.name), { days: opts.days });
      writeConfig(c, target, { cert: issued.cert, key: issued.key });
      emit(opts.json, report(issued), () =>
        [
          made ? `made a local CA in ${paths.dir}` : `kept the existing CA in ${paths.dir} (--force replaces it)`,
          `server certificate: ${issued.cert} (key ${issued.key})`,
          `  names:     ${issued.names.join(", ")}`,
          `  addresses: ${issued.addresses.join(", ")}`,
          `  valid until ${issued.not_after}`,
          `set [server.tls] in ${target.file}; restart the server to serve HTTPS`,
          "",
          ...trustHelp(issued.ca, issued.ca_fingerprint_sha256, config, issued),
        ].join("\n"),
      );
    } catch (e) {
      fail(e);
    }
  });

  days(
    cmd
      .command("renew")
      .description("a new server certificate from the same CA (same names and addresses unless --name adds more)")
      .option("--name <name>", "another DNS name or IP address to add (repeatable)", collect)
      .option("--json", "print the new certificate as JSON"),
  ).action((opts: TlsOptions, c: Command) => {
    try {
      const { config } = load(c);
      const paths = tlsPaths(config.server.data_dir);
      if (!existsSync(paths.caCert) || !existsSync(paths.caKey)) throw new TlsError(`no local CA in ${paths.dir}: run \`appliance tls init\` first`);
      const old = existsSync(paths.cert) ? readCert(readFileSync(paths.cert)) : undefined;
      const issued = issueServerCert(paths, identities(opts.name, old), { days: opts.days });
      const pid = runningServerPid(config.server.data_dir);
      emit(opts.json, { ...report(issued), previous_not_after: old?.not_after ?? null, server_pid: pid }, () =>
        [
          `renewed ${issued.cert}`,
          `  names:     ${issued.names.join(", ")}`,
          `  addresses: ${issued.addresses.join(", ")}`,
          `  valid until ${issued.not_after}${old ? ` (was ${old.not_after})` : ""}`,
          `same CA (SHA-256 ${issued.ca_fingerprint_sha256}): clients need nothing new`,
          `a running server picks it up on SIGHUP: kill -HUP ${pid ?? "<server pid>"}`,
        ].join("\n"),
      );
    } catch (e) {
      fail(e);
    }
  });

  cmd
    .command("status")
    .description("the server certificate in use: path, names, expiry, days left")
    .option("--json", "print it as JSON")
    .action((opts: TlsOptions, c: Command) => {
      try {
        const { config } = load(c);
        const paths = tlsPaths(config.server.data_dir);
        const tls = config.server.tls; // paths resolved against the config file's folder by loadConfig
        const cert = tls?.cert ?? paths.cert;
        if (!existsSync(cert)) throw new TlsError(`no server certificate at ${cert}: run \`appliance tls init\``);
        const info = readCert(readFileSync(cert));
        const left = daysLeft(info.not_after);
        const data = { cert, configured: Boolean(tls?.cert), ...info, days_left: left, ca: existsSync(paths.caCert) ? paths.caCert : null };
        emit(opts.json, data, (d) =>
          [
            `certificate: ${d.cert}${d.configured ? "" : " (not in the config: `appliance tls init` sets [server.tls])"}`,
            `  names:     ${d.names.join(", ")}`,
            `  addresses: ${d.addresses.join(", ")}`,
            `  issuer:    ${d.issuer.replace(/\n/g, ", ")}`,
            `  valid until ${d.not_after} (${left < 0 ? `expired ${-left} days ago` : `${left} days left`})`,
            ...(left < 30 ? ["  run `appliance tls renew`"] : []),
          ].join("\n"),
        );
      } catch (e) {
        fail(e);
      }
    });
  return cmd;
}

function report(i: Issued) {
  return { ca: i.ca, cert: i.cert, key: i.key, fingerprint_sha256: i.ca_fingerprint_sha256, cert_fingerprint_sha256: i.fingerprint_sha256, names: i.names, addresses: i.addresses, not_after: i.not_after, serial: i.serial };
}
