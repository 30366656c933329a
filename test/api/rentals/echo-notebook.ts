// A stand-in notebook server that tells what it received (issue 41 L1), started by the real process
// launcher with the flags it gives `jupyter lab` (--port, --ip, --ServerApp.base_url; the token in
// JUPYTER_TOKEN). Under its base_url: `api` without auth (the launcher's readiness probe), and with
// the token (`?token=`, `Authorization: token|Bearer …`) or its login cookie:
//   echo                       the request's headers as JSON;
//   set-cookies                Set-Cookie headers a hostile notebook could send;
//   api/kernels/{id}/channels  a WebSocket whose first message is the upgrade request's headers.

const arg = (name: string) => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
const port = Number(arg("port"));
const token = process.env.JUPYTER_TOKEN;
const base = arg("ServerApp.base_url") ?? "/";
if (!port || !token) {
  console.error("echo-notebook: --port and JUPYTER_TOKEN in the environment are required");
  process.exit(2);
}
// Its login cookie (Jupyter sets one once the token was accepted; here the test sends it).
const LOGIN = "nb-own=1";

function headersOf(req: Request): Record<string, string> {
  const out: Record<string, string> = {};
  req.headers.forEach((v, k) => (out[k] = v));
  return out;
}

/** What a notebook might try to set: the appliance's own cookie names, paths outside its own, another domain. */
const HOSTILE_COOKIES = [
  `appliance_session=planted; Path=/console; HttpOnly`,
  `appliance_session=planted; Path=${base}`,
  `appliance_device=planted; Path=/console/api/login`,
  `appliance_rental=planted; Path=${base}`,
  `Appliance_Session=planted; Path=${base}`,
  `shadow=1; Path=/`,
  `nb-own=1; Path=${base}; HttpOnly`,
  `nb-nopath=1; SameSite=Lax`,
  `nb-domain=1; Domain=example.org; Path=${base}`,
];

Bun.serve<Record<string, string>>({
  port,
  hostname: arg("ip") ?? "127.0.0.1",
  fetch(req, server) {
    const url = new URL(req.url);
    if (!url.pathname.startsWith(base)) return new Response("not found", { status: 404 });
    const rest = url.pathname.slice(base.length);
    if (rest === "api") return Response.json({ version: "echo" });
    const given = url.searchParams.get("token") ?? /^(?:token|bearer)\s+(\S+)$/i.exec(req.headers.get("authorization") ?? "")?.[1];
    const loggedIn = given === token || (req.headers.get("cookie") ?? "").split(/;\s*/).includes(LOGIN);
    if (!loggedIn) return new Response("forbidden", { status: 403 });
    if (/^api\/kernels\/[^/]+\/channels$/.test(rest)) return server.upgrade(req, { data: headersOf(req) }) ? undefined : new Response("upgrade failed", { status: 400 });
    if (rest === "echo") return Response.json(headersOf(req));
    if (rest === "set-cookies") return new Response("cookies", { headers: HOSTILE_COOKIES.map((c) => ["set-cookie", c] as [string, string]) });
    return new Response("not found", { status: 404 });
  },
  websocket: {
    open(ws) {
      ws.send(JSON.stringify(ws.data));
    },
    message() {},
  },
});
console.log(`echo-notebook listening on ${port}`);
process.on("SIGTERM", () => process.exit(0));
export {};
