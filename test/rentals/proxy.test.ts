import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Server } from "bun";
import { rentalUpgrade, rentalWebSocket } from "../../src/1-api/rentals/proxy";
import { publicBaseOf } from "../../src/2-services/rentals/access";
import type { LaunchHandle, LaunchIntent, Launcher, LaunchSpec } from "../../src/2-services/rentals/launchers/types";
import { rentalsStoreOf } from "../../src/4-store/store";
import { createRentalsService } from "../../src/2-services/rentals/service";
import { testApp, type TestApp } from "../helpers/app";

// A rental reached through the appliance's own port (issue 27): a stand-in notebook server (a Bun
// server that requires its token, serves under its base_url and echoes on a WebSocket) launched by
// the real rental service in proxy mode, reached over real HTTP and a real WebSocket through a
// Bun.serve wired as src/main.ts wires it (fetch: rentalUpgrade, else app.handle; websocket:
// rentalWebSocket).

const NODE = { node_id: "7d4a0f9e-1a43-5c1e-9d2b-0c1d2e3f4a5b", gpu: "NVIDIA GeForce RTX 4090", gpu_uuids: ["GPU-1"], vram_mb: 24564, compute_cap: 8.9, country: "Germany", country_code: "DE", price_per_hour: 0.6, launcher: "stand-in" };

/** What the stand-in notebook saw: hosts, and whether a request carried any appliance credential. */
const seen: { host: string | null; authorization: string | null; cookie: string | null }[] = [];

function standInLauncher(): Launcher {
  const servers = new Map<string, Server<unknown>>();
  return {
    name: "stand-in",
    intent: (spec: LaunchSpec): LaunchIntent => ({ launcher: "stand-in", data: { rentalId: spec.rentalId } }),
    async start(spec: LaunchSpec): Promise<LaunchHandle> {
      const base = spec.basePath ?? "/";
      const server = Bun.serve({
        hostname: "127.0.0.1",
        port: 0,
        async fetch(req, srv) {
          const url = new URL(req.url);
          seen.push({ host: req.headers.get("host"), authorization: req.headers.get("authorization"), cookie: req.headers.get("cookie") });
          if (!url.pathname.startsWith(base)) return new Response("outside base_url", { status: 404 });
          const rest = url.pathname.slice(base.length);
          if (rest === "api") return Response.json({ version: "stand-in" });
          // As Jupyter: the token in the query or header, or the login cookie it set.
          const given = url.searchParams.get("token") ?? req.headers.get("authorization")?.replace(/^token /i, "") ?? null;
          const loggedIn = req.headers.get("cookie")?.includes("nb-login=yes") ?? false;
          if (given !== spec.token && !loggedIn) return new Response("forbidden", { status: 403 });
          if (req.headers.get("upgrade") === "websocket") {
            // As Jupyter: the kernel protocol when the client offers it.
            const offered = req.headers.get("sec-websocket-protocol")?.includes("v1.kernel.websocket.jupyter.org");
            return srv.upgrade(req, { data: undefined, headers: offered ? { "sec-websocket-protocol": "v1.kernel.websocket.jupyter.org" } : {} }) ? undefined : new Response("no", { status: 400 });
          }
          const cookies = [`nb-login=yes; Path=${base}; HttpOnly`, "evil=1; Path=/"];
          if (rest === "") return new Response(null, { status: 302, headers: { location: `${base}lab` } });
          // What a hostile notebook could send: redirects off its path, headers that act on the whole origin.
          if (rest === "go-console") return new Response(null, { status: 302, headers: { location: "/console/api/keys" } });
          if (rest === "go-other") return new Response(null, { status: 307, headers: { location: `${new URL(req.url).origin.replace("127.0.0.1", "localhost")}/x` } });
          if (rest === "go-sibling") return new Response(null, { status: 302, headers: { location: base.replace(/[^/]+\/$/, "rent_other/") } });
          if (rest === "go-far") return new Response(null, { status: 302, headers: { location: "https://example.org/docs" } });
          if (rest === "wide-headers")
            return new Response("<p>hi</p>", {
              headers: {
                "content-type": "text/html",
                "cross-origin-opener-policy": "unsafe-none",
                "service-worker-allowed": "/",
                "clear-site-data": '"cookies"',
                "alt-svc": 'h2=":9999"',
                nel: '{"report_to":"x","max_age":1}',
                "report-to": '{"group":"x","max_age":1,"endpoints":[{"url":"https://example.org"}]}',
                "strict-transport-security": "max-age=1; includeSubDomains",
                "content-security-policy": "img-src 'self'",
                "x-notebook": "kept",
              },
            });
          if (req.method === "POST") return Response.json({ echo: await req.text(), type: req.headers.get("content-type") }, { headers: [["set-cookie", cookies[0]!], ["set-cookie", cookies[1]!]] });
          return Response.json({ lab: true, path: url.pathname }, { headers: [["set-cookie", cookies[0]!], ["set-cookie", cookies[1]!]] });
        },
        websocket: {
          message(ws, m) {
            if (m === "close-4321") return ws.close(4321, "asked");
            ws.send(typeof m === "string" ? `echo:${m}` : m);
          },
        },
      });
      servers.set(spec.rentalId, server as Server<unknown>);
      const upstream = `http://127.0.0.1:${server.port}`;
      return { launcher: "stand-in", url: `${upstream}${base}lab`, data: { rentalId: spec.rentalId }, ...(spec.basePath ? { proxy: { upstream, basePath: spec.basePath } } : {}) };
    },
    probe: async (h) => (servers.has(h.data.rentalId as string) ? "ready" : "dead"),
    async stop(h) {
      await servers.get(h.data.rentalId as string)?.stop(true);
      servers.delete(h.data.rentalId as string);
    },
    async reclaim() {},
    logs: async () => "",
    health: async () => null,
  };
}

let t: TestApp;
let key: string;
let appliance: Server<any>;
let base: string;

beforeAll(async () => {
  // The appliance's port first: its base URL is what connection.url must name.
  let app: TestApp["app"] | null = null;
  let rentals: ReturnType<typeof createRentalsService> | null = null;
  appliance = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    // As src/main.ts: a rental WebSocket upgrade, else the app.
    fetch: (req, srv) => rentalUpgrade(rentals!, req, srv, () => app!.handle(req)) ?? app!.handle(req),
    websocket: rentalWebSocket,
  });
  base = publicBaseOf({ port: appliance.port! }, "127.0.0.1");
  t = testApp({
    config: { rental_nodes: [], rentals: { discover: false } },
    override: (deps) => ({
      rentals: createRentalsService({ store: rentalsStoreOf(deps.store), meter: deps.meter, clock: deps.clock, logger: deps.logger, dataDir: t?.dir ?? deps.config.server.data_dir, nodes: () => [NODE], launchers: { "stand-in": standInLauncher() }, maxHours: 10, readyTimeoutMs: 10_000, tickMs: 50, access: "proxy", publicBase: base }),
    }),
  });
  app = t.app;
  rentals = t.deps.rentals;
  await rentals.start();
  key = await t.key({ account: "renter", creditUsd: 5, scopes: ["inference", "rental"], maxActiveRentals: 2 });
});
afterAll(async () => {
  await t.deps.rentals.stop();
  appliance.stop(true);
  await t.close();
});

/** A running rental on the one node (the previous test's rental stopped first). */
async function runningRental(): Promise<any> {
  const list = await (await t.request("GET", "/api/v1/rentals", { key })).json();
  for (const r of list.data) if (r.status === "running") await t.request("DELETE", `/api/v1/rentals/${r.rental_id}`, { key });
  const created = await (await t.request("POST", "/api/v1/rentals", { key, body: { node_id: NODE.node_id, type: "jupyter" } })).json();
  for (let i = 0; i < 200; i++) {
    const r = await (await t.request("GET", `/api/v1/rentals/${created.rental_id}`, { key })).json();
    if (r.status === "running") return r;
    await Bun.sleep(25);
  }
  throw new Error("the rental never ran");
}

function openSocket(url: string, init?: { headers?: Record<string, string>; protocols?: string[] }): Promise<WebSocket> {
  const ws = new WebSocket(url, init as any);
  ws.binaryType = "arraybuffer";
  return new Promise((resolve, reject) => {
    ws.onopen = () => resolve(ws);
    ws.onerror = () => reject(new Error("websocket refused"));
  });
}

const next = (ws: WebSocket) => new Promise<any>((resolve) => (ws.onmessage = (e) => resolve(e.data)));

test("connection.url names /rentals/{id}/ on the appliance; HTTP GET and POST reach the notebook with its token, and the access cookie carries on", async () => {
  const r = await runningRental();
  expect(r.connection.url).toBe(`${base}/rentals/${r.rental_id}/?token=${r.connection.token}`);

  // The first request, as a browser opens connection.url: the notebook's redirect passes unchanged.
  const first = await fetch(r.connection.url, { redirect: "manual" });
  expect(first.status, await first.clone().text()).toBe(302);
  expect(first.headers.get("location")).toBe(`/rentals/${r.rental_id}/lab`);
  const access = first.headers.getSetCookie().find((c) => c.startsWith("appliance_rental="))!;
  expect(access).toContain(`Path=/rentals/${r.rental_id}/`);
  expect(access).toContain("HttpOnly");
  expect(access).not.toContain(r.connection.token); // a derived value, not the token
  const cookie = access.split(";")[0]!;

  // Later requests carry no token, only cookies (the access one, and the notebook's login one).
  const lab = await fetch(`${base}/rentals/${r.rental_id}/lab`, { headers: { cookie: `${cookie}; nb-login=yes` } });
  expect(lab.status).toBe(200);
  expect(await lab.json()).toEqual({ lab: true, path: `/rentals/${r.rental_id}/lab` });
  // The notebook's own cookie stays on its path; one for / (the console's origin) is dropped.
  expect(lab.headers.getSetCookie()).toEqual([`nb-login=yes; Path=/rentals/${r.rental_id}/; HttpOnly`]);
  // The notebook saw the appliance's Host (Jupyter checks Origin against it) and no appliance cookie.
  expect(seen.at(-1)!.host).toBe(new URL(base).host);
  expect(seen.at(-1)!.cookie).toBe("nb-login=yes");

  const post = await fetch(`${base}/rentals/${r.rental_id}/api/contents/x.txt`, { method: "POST", headers: { authorization: `token ${r.connection.token}`, "content-type": "application/json" }, body: JSON.stringify({ content: "héllo", n: [1, 2] }) });
  expect(post.status).toBe(200);
  expect(await post.json()).toEqual({ echo: JSON.stringify({ content: "héllo", n: [1, 2] }), type: "application/json" });

  // /rentals/{id} without its slash goes to the base_url, query kept.
  const bare = await fetch(`${base}/rentals/${r.rental_id}?token=${r.connection.token}`, { redirect: "manual" });
  expect(bare.status).toBe(308);
  expect(bare.headers.get("location")).toBe(`/rentals/${r.rental_id}/?token=${r.connection.token}`);
});

test("a WebSocket echoes through the proxy both ways, with the notebook's subprotocol, and its close code comes back", async () => {
  const r = await runningRental();
  const ws = await openSocket(`${base.replace("http", "ws")}/rentals/${r.rental_id}/api/kernels/k1/channels?token=${r.connection.token}`, { protocols: ["v1.kernel.websocket.jupyter.org"] });
  expect(ws.protocol).toBe("v1.kernel.websocket.jupyter.org");
  ws.send("hello");
  expect(await next(ws)).toBe("echo:hello");
  ws.send(new Uint8Array([1, 2, 3, 250]));
  expect([...new Uint8Array(await next(ws))]).toEqual([1, 2, 3, 250]);
  const closed = new Promise<CloseEvent>((resolve) => (ws.onclose = resolve));
  ws.send("close-4321");
  const e = await closed;
  expect(e.code).toBe(4321);
  expect(e.reason).toBe("asked");

  // With the access cookie instead of the token.
  const first = await fetch(r.connection.url, { redirect: "manual" });
  const cookie = first.headers.getSetCookie().find((c) => c.startsWith("appliance_rental="))!.split(";")[0]!;
  const ws2 = await openSocket(`${base.replace("http", "ws")}/rentals/${r.rental_id}/terminals/websocket/1`, { headers: { cookie: `${cookie}; nb-login=yes` } });
  ws2.send("again");
  expect(await next(ws2)).toBe("echo:again");
  ws2.close(1000);
});

test("without the token, or with a wrong one, the appliance refuses (401) before the notebook sees anything; HTTP and WebSocket", async () => {
  const r = await runningRental();
  const before = seen.length;
  const url = `${base}/rentals/${r.rental_id}/lab`;
  expect((await fetch(url)).status).toBe(401);
  expect((await fetch(`${url}?token=nope`)).status).toBe(401);
  expect((await fetch(url, { headers: { authorization: "token nope" } })).status).toBe(401);
  expect((await fetch(url, { headers: { cookie: "appliance_rental=0123" } })).status).toBe(401);
  // An API key is no notebook token.
  expect((await fetch(url, { headers: { authorization: `Bearer ${key}` } })).status).toBe(401);
  await expect(openSocket(`${base.replace("http", "ws")}/rentals/${r.rental_id}/api/kernels/k1/channels?token=nope`)).rejects.toThrow();
  await expect(openSocket(`${base.replace("http", "ws")}/rentals/${r.rental_id}/api/kernels/k1/channels`)).rejects.toThrow();
  expect(seen.length).toBe(before);
});

test("an unknown or ended rental is a 404, even with the right token", async () => {
  expect((await fetch(`${base}/rentals/rent_nope/lab?token=x`)).status).toBe(404);
  const r = await runningRental();
  const stopped = await (await t.request("DELETE", `/api/v1/rentals/${r.rental_id}`, { key })).json();
  expect(stopped.status).toBe("stopped");
  expect((await fetch(r.connection.url)).status).toBe(404);
  await expect(openSocket(`${base.replace("http", "ws")}/rentals/${r.rental_id}/api/kernels/k1/channels?token=${r.connection.token}`)).rejects.toThrow();
});

test("the token never reaches the logs", async () => {
  const r = await runningRental();
  await fetch(r.connection.url, { redirect: "manual" });
  await fetch(`${base}/rentals/${r.rental_id}/lab?token=nope`);
  const lines = JSON.stringify(t.logs);
  expect(lines).toContain("/rentals/:id/*"); // proxied requests are logged, by route
  expect(lines).not.toContain(r.connection.token);
  expect(lines).not.toContain("token=");
});

test("every proxied page is held to its rental's path: a CSP naming only /rentals/{id}/ for fetches, scripts, workers, frames and forms; no opener; origin-wide headers dropped", async () => {
  const r = await runningRental();
  const res = await fetch(`${base}/rentals/${r.rental_id}/wide-headers?token=${r.connection.token}`);
  expect(res.status).toBe(200);
  const own = `${base}/rentals/${r.rental_id}/`;
  const csp = res.headers.get("content-security-policy")!;
  // The notebook's own policy is kept beside the appliance's (a browser enforces both).
  expect(csp.split(", ")).toContain("img-src 'self'");
  const ours = csp.split(", ").find((p) => p.startsWith("connect-src"))!;
  const directives = Object.fromEntries(ours.split("; ").map((d) => [d.split(" ")[0], d.split(" ").slice(1)]));
  expect(directives["connect-src"]).toEqual([own, own.replace("http", "ws")]);
  expect(directives["script-src"]![0]).toBe(own);
  expect(directives["script-src"]!.filter((x: string) => /^https?:/.test(x))).toEqual([own]);
  for (const d of ["worker-src", "frame-src", "child-src"]) expect(directives[d]!.filter((x: string) => /^https?:/.test(x) || x === "'self'" || x === "*")).toEqual([own]);
  expect(directives["form-action"]).toEqual([own]);
  expect(directives["object-src"]).toEqual(["'none'"]);
  expect(res.headers.get("cross-origin-opener-policy")).toBe("noopener-allow-popups");
  for (const h of ["service-worker-allowed", "clear-site-data", "alt-svc", "nel", "report-to", "strict-transport-security"]) expect(res.headers.get(h)).toBeNull();
  expect(res.headers.get("x-notebook")).toBe("kept");
  // The appliance's own answers (the API, the console, a refused rental request) keep their windows to themselves.
  for (const path of ["/health", "/console", `/rentals/${r.rental_id}/lab`, "/v1/models"]) expect((await fetch(base + path, { redirect: "manual" })).headers.get("cross-origin-opener-policy")).toBe("same-origin");
});

test("a redirect off the rental's path on this origin is refused (a CSP path check does not survive a redirect); its own paths and other origins pass", async () => {
  const r = await runningRental();
  const get = (p: string) => fetch(`${base}/rentals/${r.rental_id}/${p}?token=${r.connection.token}`, { redirect: "manual" });
  for (const p of ["go-console", "go-sibling"]) {
    const res = await get(p);
    expect(res.status).toBe(502);
    expect(((await res.json()) as any).error.code).toBe("upstream_error");
  }
  expect((await get("go-far")).headers.get("location")).toBe("https://example.org/docs");
  expect((await get("go-other")).status).toBe(307); // another origin (localhost ≠ 127.0.0.1) is no path of this one
  expect((await get("")).headers.get("location")).toBe(`/rentals/${r.rental_id}/lab`);
});

test("publicBaseOf says https when server.tls has a certificate, and brackets an IPv6 host", () => {
  expect(publicBaseOf({ port: 8080 }, "gpu.local")).toBe("http://gpu.local:8080");
  expect(publicBaseOf({ port: 8443, tls: { cert: "/c.pem", key: "/k.pem" } } as any, "gpu.local")).toBe("https://gpu.local:8443");
  expect(publicBaseOf({ port: 443, tls: { cert: "/c.pem" } } as any, "::1")).toBe("https://[::1]");
  expect(publicBaseOf({ port: 80, tls: {} } as any, "10.0.0.2")).toBe("http://10.0.0.2");
});
