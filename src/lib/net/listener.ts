import { createPrivateKey, X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import type { Server, WebSocketHandler } from "bun";
import { readCert } from "./tls-ca";

// The main listener: plain HTTP, or HTTPS with Bun's own TLS from `[server.tls]` PEM files. A
// certificate is swapped (SIGHUP, after `appliance tls renew`) without dropping a connection:
// Bun cannot change a running server's certificate, so a second server is bound to the same port
// (SO_REUSEPORT, set on every TLS listener) and the old one stops accepting; connections already
// open on it, streams included, finish there. New connections get the new certificate.

export interface TlsFiles {
  cert: string;
  key: string;
}

export interface TlsMaterial {
  cert: string;
  key: string;
  /** The leaf's names and addresses, expiry and SHA-256 fingerprint, for logs (tls-ca.ts readCert). */
  names: string;
  notAfter: string;
  fingerprint256: string;
}

export class TlsConfigError extends Error {
  override name = "TlsConfigError";
}

/** Reads and checks the PEM files: a certificate (leaf first, then its chain) and the leaf's private key. */
export function readTls(files: TlsFiles): TlsMaterial {
  const read = (path: string, what: string) => {
    try {
      return readFileSync(path, "utf8");
    } catch (e) {
      throw new TlsConfigError(`server.tls.${what}: cannot read ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
    }
  };
  const cert = read(files.cert, "cert");
  const key = read(files.key, "key");
  let leaf: X509Certificate;
  try {
    leaf = new X509Certificate(cert);
  } catch (e) {
    throw new TlsConfigError(`server.tls.cert: ${files.cert} holds no PEM certificate (${(e as Error).message})`);
  }
  let privateKey;
  try {
    privateKey = createPrivateKey(key);
  } catch (e) {
    throw new TlsConfigError(`server.tls.key: ${files.key} holds no PEM private key (${(e as Error).message})`);
  }
  if (!leaf.checkPrivateKey(privateKey)) throw new TlsConfigError(`server.tls: the key in ${files.key} is not the key of the certificate in ${files.cert}`);
  const info = readCert(cert);
  return { cert, key, names: [...info.names, ...info.addresses].join(", ") || info.subject, notAfter: info.not_after, fingerprint256: info.fingerprint_sha256 };
}

export interface ListenOptions {
  hostname: string;
  port: number;
  maxRequestBodySize: number;
  // Server<any>: the WebSocket data type is the handler's (the rental proxy's), not the listener's.
  fetch: (req: Request, server: Server<any>) => Response | undefined | Promise<Response | undefined>;
  websocket: WebSocketHandler<any>;
  tls?: TlsMaterial;
}

export class MainListener {
  /** Listeners replaced by a certificate swap, finishing their open connections. */
  private retired: { server: Server<any>; closed: Promise<void> }[] = [];

  private constructor(
    private server: Server<any>,
    private readonly opts: ListenOptions,
  ) {}

  static start(opts: ListenOptions): MainListener {
    if (!opts.tls) return new MainListener(MainListener.bind(opts, false), opts);
    // SO_REUSEPORT would let a second appliance share the port silently: bind once without it
    // first, so a port in use is refused as it is without TLS.
    const probe = MainListener.bind({ ...opts, tls: undefined }, false);
    const port = probe.port!;
    probe.stop(true);
    return new MainListener(MainListener.bind({ ...opts, port }, true), opts);
  }

  private static bind(o: ListenOptions, reusePort: boolean): Server<any> {
    return Bun.serve({
      hostname: o.hostname,
      port: o.port,
      reusePort,
      maxRequestBodySize: o.maxRequestBodySize,
      ...(o.tls ? { tls: { cert: o.tls.cert, key: o.tls.key } } : {}),
      fetch: o.fetch,
      websocket: o.websocket,
    });
  }

  get hostname(): string {
    return this.server.hostname ?? this.opts.hostname;
  }

  get port(): number {
    return this.server.port!;
  }

  get url(): string {
    const host = this.hostname.includes(":") ? `[${this.hostname}]` : this.hostname;
    return `${this.opts.tls ? "https" : "http"}://${host}:${this.port}`;
  }

  get tls(): boolean {
    return this.opts.tls !== undefined;
  }

  /** Serves new connections with `tls`; the old listener's open connections finish where they are. */
  swapTls(tls: TlsMaterial): void {
    if (!this.opts.tls) throw new TlsConfigError("TLS cannot be switched on without a restart");
    const next = MainListener.bind({ ...this.opts, port: this.port, tls }, true);
    const old = this.server;
    this.server = next;
    this.opts.tls = tls;
    this.retired.push({ server: old, closed: old.stop(false) });
  }

  /** Stops accepting; `force` also cuts open connections. */
  async stop(force: boolean): Promise<void> {
    await Promise.all([this.server.stop(force), ...this.retired.map((r) => (force ? r.server.stop(true) : r.closed))]);
    if (force) this.retired = [];
  }
}

/**
 * With TLS on, an optional plain-HTTP listener that answers `/health` itself and redirects every
 * other request (308, method and body kept) to the same path on the HTTPS port.
 */
export function startRedirectListener(o: { hostname: string; port: number; httpsPort: number; health: (req: Request) => Response | Promise<Response> }): Server<any> {
  return Bun.serve({
    hostname: o.hostname,
    port: o.port,
    fetch(req) {
      // a request without a usable Host (HTTP/1.0) comes as its path alone: resolved against a base, never thrown
      const url = new URL(req.url, "http://no-host.invalid");
      if (url.pathname === "/health") return o.health(req);
      const host = (req.headers.get("host") ?? url.host).replace(/:\d+$/, "");
      return new Response(null, { status: 308, headers: { location: `https://${host}:${o.httpsPort}${url.pathname}${url.search}` } });
    },
  });
}
