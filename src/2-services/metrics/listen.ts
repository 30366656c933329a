import { ConfigError, type Config } from "../../lib/config";
import { scrapeResponse, type ScrapeDeps } from "./collect";

// The optional scrape listener (server.metrics_listen = "127.0.0.1:9464"): GET /metrics with no
// key, for a Prometheus on this host or a private network. Bind it to loopback or an interface
// only the scraper reaches; the main listener keeps /metrics for admin keys.

export interface MetricsListener {
  /** "http://host:port", or null when server.metrics_listen is empty. */
  url: string | null;
  stop(): void;
}

export function startMetricsListener(deps: ScrapeDeps & { config: Pick<Config, "server"> }): MetricsListener {
  const listen = deps.config.server.metrics_listen;
  if (!listen) return { url: null, stop() {} };
  const { hostname, port } = parseListen(listen);
  const server = Bun.serve({
    hostname,
    port,
    fetch(req) {
      // a request without a usable Host (HTTP/1.0) comes as its path alone: resolved against a base, never thrown
      const { pathname } = new URL(req.url, "http://no-host.invalid");
      if (pathname !== "/metrics") return new Response("not found: this listener serves GET /metrics\n", { status: 404 });
      if (req.method !== "GET" && req.method !== "HEAD") return new Response("method not allowed\n", { status: 405, headers: { allow: "GET, HEAD" } });
      return scrapeResponse(deps);
    },
  });
  const host = server.hostname?.includes(":") ? `[${server.hostname}]` : server.hostname;
  return { url: `http://${host}:${server.port}`, stop: () => void server.stop(true) };
}

/** "127.0.0.1:9464", "[::1]:9464", "0.0.0.0:9464" → hostname and port. */
export function parseListen(s: string): { hostname: string; port: number } {
  const m = /^(?:\[([0-9A-Fa-f:.]+)\]|([^\s:[\]]+)):(\d{1,5})$/.exec(s);
  const port = m ? Number(m[3]) : NaN;
  if (!m || port > 65535) throw new ConfigError(`server.metrics_listen: expected "host:port" (e.g. "127.0.0.1:9464"), got "${s}"`);
  return { hostname: m[1] ?? m[2]!, port };
}
