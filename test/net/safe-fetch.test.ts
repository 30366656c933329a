import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import net from "node:net";
import { join } from "node:path";
import tls from "node:tls";
import { classifyAddress } from "../../src/lib/net/address";
import { FetchRefused, safeFetch, type SafeFetchOptions } from "../../src/lib/net/safe-fetch";

// Real connections on this host: `secret` (127.0.0.1) stands for a service inside the network, a
// bare TCP listener counts connection attempts (a TLS handshake needs one), and `outside`
// (127.0.0.2, the same port as `secret`) plays a public web server — the judge is told that this
// one address is public, so a redirect or a DNS answer can lead from it to the inside.

const OUTSIDE = "127.0.0.2";
const judge = (a: string) => (a === OUTSIDE ? { internal: false, address: a } : classifyAddress(a));

let secretHits = 0;
let outsideHits = 0;
let tcpConnections = 0;
let secret: ReturnType<typeof Bun.serve>;
let outside: ReturnType<typeof Bun.serve>;
let tcp: net.Server;
let closedPort: number;

function serveOutside(port: number) {
  return Bun.serve({
    port,
    hostname: OUTSIDE,
    fetch(req) {
      outsideHits++;
      const url = new URL(req.url);
      if (url.pathname === "/redirect") return new Response(null, { status: 302, headers: { location: url.searchParams.get("to")! } });
      return new Response(`outside; host=${req.headers.get("host")}`);
    },
  });
}

beforeAll(async () => {
  // `outside` takes the port `secret` got, so that one URL can reach either; retry if it is taken
  for (let i = 0; ; i++) {
    secret = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => (secretHits++, new Response("secret")) });
    try {
      outside = serveOutside(secret.port!);
      break;
    } catch (e) {
      secret.stop(true);
      if (i === 5) throw e;
    }
  }
  tcp = net.createServer((s) => (tcpConnections++, s.destroy()));
  await new Promise<void>((r) => tcp.listen(0, "127.0.0.1", r));
  const closed = net.createServer();
  await new Promise<void>((r) => closed.listen(0, "127.0.0.1", r));
  closedPort = (closed.address() as net.AddressInfo).port;
  await new Promise((r) => closed.close(r));
});
afterAll(() => {
  secret.stop(true);
  outside.stop(true);
  tcp.close();
});

const options = (o: Partial<SafeFetchOptions> = {}): SafeFetchOptions => ({
  protocols: ["https:", "http:"],
  allowPrivate: false,
  maxRedirects: 3,
  signal: AbortSignal.timeout(2000),
  classify: judge,
  resolve: async (h) => {
    throw new Error(`no DNS in this test (${h})`);
  },
  ...o,
});

async function refusal(url: string, o: Partial<SafeFetchOptions> = {}): Promise<FetchRefused> {
  try {
    const res = await safeFetch(new URL(url), options(o));
    throw new Error(`expected a refusal, got ${res.status}: ${await res.text()}`);
  } catch (e) {
    if (e instanceof FetchRefused) return e;
    throw e;
  }
}

const loopbackForms = ["[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[0:0:0:0:0:ffff:127.0.0.1]", "[::127.0.0.1]", "[64:ff9b::127.0.0.1]", "[2002:7f00:1::]", "2130706433", "0177.0.0.1", "127.1", "0x7f.1", "127.0.0.1"];

describe("internal addresses are refused before any connection", () => {
  test("every form of loopback, over http and https, is refused and the listener sees no connection", async () => {
    for (const scheme of ["http", "https"])
      for (const host of loopbackForms) {
        const e = await refusal(`${scheme}://${host}:${(tcp.address() as net.AddressInfo).port}/img.png`);
        expect([host, e.kind]).toEqual([host, "internal"]);
        expect(e.message).toContain("loopback");
      }
    expect(tcpConnections).toBe(0);
  });

  test("mapped cloud metadata ([::ffff:169.254.169.254]) is refused as link-local", async () => {
    const e = await refusal("http://[::ffff:169.254.169.254]/latest/meta-data/");
    expect(e.message).toBe("points at an internal address (::ffff:a9fe:a9fe, which leads to 169.254.169.254: link-local)");
  });

  test("https to an internal address answers the same whether its port listens or not (no port-scan oracle)", async () => {
    const listening = await refusal(`https://[::ffff:127.0.0.1]:${(tcp.address() as net.AddressInfo).port}/`, { protocols: ["https:"] });
    const closed = await refusal(`https://[::ffff:127.0.0.1]:${closedPort}/`, { protocols: ["https:"] });
    expect(listening.message).toBe(closed.message);
    expect(tcpConnections).toBe(0);
  });

  test("a name that resolves to a public and an internal address is refused", async () => {
    const e = await refusal(`http://both.test:${secret.port}/`, { resolve: async () => [OUTSIDE, "::ffff:127.0.0.1"] });
    expect(e.kind).toBe("internal");
    expect([secretHits, outsideHits]).toEqual([0, 0]);
  });
});

describe("redirects", () => {
  const viaOutside = (to: string) => `http://${OUTSIDE}:${outside.port}/redirect?to=${encodeURIComponent(to)}`;

  test("a redirect to any internal form of loopback is refused, and loopback sees no request", async () => {
    for (const host of loopbackForms) {
      const e = await refusal(viaOutside(`http://${host}:${secret.port}/secret`));
      expect([host, e.kind]).toEqual([host, "internal"]);
    }
    expect(secretHits).toBe(0);
  });

  test("a redirect to a name that resolves inside is refused", async () => {
    const e = await refusal(viaOutside(`http://inside.test:${secret.port}/secret`), { resolve: async () => ["::ffff:7f00:1"] });
    expect(e.kind).toBe("internal");
    expect(secretHits).toBe(0);
  });

  test("a redirect to a public address is followed", async () => {
    const res = await safeFetch(new URL(viaOutside(`http://${OUTSIDE}:${outside.port}/img.png`)), options());
    expect([res.status, await res.text()]).toEqual([200, `outside; host=${OUTSIDE}:${outside.port}`]);
  });
});

describe("the connection goes to the address that was judged", () => {
  test("a resolver that answers public first and loopback second: the one fetch goes to the first answer", async () => {
    const answers = [[OUTSIDE], ["127.0.0.1"]];
    let asked = 0;
    const before = [secretHits, outsideHits];
    const res = await safeFetch(new URL(`http://rebind.test:${secret.port}/img.png`), options({ resolve: async () => answers[asked++]! }));
    expect([res.status, await res.text()]).toEqual([200, `outside; host=rebind.test:${secret.port}`]);
    expect(asked).toBe(1);
    expect([secretHits - before[0]!, outsideHits - before[1]!]).toEqual([0, 1]);
  });

  test("over https the name goes as the TLS server name to the resolved address, and the certificate is checked", async () => {
    const fixtures = join(import.meta.dir, "../fixtures/net");
    const key = readFileSync(join(fixtures, "img.test.key"), "utf8");
    const cert = readFileSync(join(fixtures, "img.test.crt"), "utf8");
    const names: string[] = [];
    const server = tls.createServer({ key, cert, SNICallback: (name, cb) => (names.push(name), cb(null, tls.createSecureContext({ key, cert }))) });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    try {
      const e = await refusal(`https://img.test:${(server.address() as net.AddressInfo).port}/x.png`, { allowPrivate: true, resolve: async () => ["127.0.0.1"] });
      expect(e.kind).toBe("unreachable");
      expect(e.message).toContain("self signed certificate"); // not trusted: the check ran
      expect(names).toEqual(["img.test"]);
    } finally {
      server.close();
    }
  });
});
