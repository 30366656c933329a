import { setClientAddress } from "../../../src/1-api/http/context";
import { SESSION_COOKIE } from "../../../src/2-services/console/auth";
import { DEVICE_COOKIE } from "../../../src/2-services/console/devices";
import { BASE, type TestApp } from "../../helpers/app";

// A browser-like client of the console API over app.handle: keeps the session cookie (and the
// device cookie, sent to the sign-in only, as its Path says), sends the CSRF token on
// state-changing requests, and the page's Origin. `address` is the client address the socket
// would have seen (unset: "local", a request served without a socket).

export interface ConsoleClient {
  cookie: string | null;
  device: string | null;
  csrf: string | null;
  address: string | null;
  signIn(account: string, password: string): Promise<Response>;
  call(method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<Response>;
  json<T = any>(method: string, path: string, body?: unknown): Promise<T>;
}

export function consoleClient(t: TestApp, o: { address?: string } = {}): ConsoleClient {
  const c: ConsoleClient = {
    cookie: null,
    device: null,
    csrf: null,
    address: o.address ?? null,
    async signIn(account, password) {
      const res = await c.call("POST", "/console/api/login", { account, password });
      if (res.ok) {
        for (const set of res.headers.getSetCookie()) {
          const pair = set.split(";")[0]!;
          if (pair.startsWith(`${SESSION_COOKIE}=`)) c.cookie = pair;
          if (pair.startsWith(`${DEVICE_COOKIE}=`)) c.device = pair;
        }
        c.csrf = ((await res.clone().json()) as any).csrf;
      }
      return res;
    },
    call(method, path, body, headers = {}) {
      const h: Record<string, string> = { origin: BASE, ...headers };
      const cookies = [c.cookie, path === "/console/api/login" ? c.device : null].filter(Boolean);
      if (cookies.length) h.cookie = cookies.join("; ");
      if (c.csrf && method !== "GET") h["x-csrf-token"] ??= c.csrf;
      if (body !== undefined) h["content-type"] = "application/json";
      const req = new Request(BASE + path, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body) });
      if (c.address) setClientAddress(req, c.address);
      return t.app.handle(req);
    },
    async json(method, path, body) {
      const res = await c.call(method, path, body);
      if (!res.ok) throw new Error(`${method} ${path} → ${res.status} ${await res.text()}`);
      return res.json() as any;
    },
  };
  return c;
}

/** An account with a console password (and credit). */
export async function consoleAccount(t: TestApp, name: string, o: { password?: string; admin?: boolean; creditUsd?: number } = {}) {
  await t.deps.accounts.createAccount(name, { role: o.admin ? "admin" : "user", creditMicros: o.creditUsd ? Math.round(o.creditUsd * 1e6) : undefined });
  const password = o.password ?? `pw-${name}-0123456789`;
  await t.deps.console.auth.setPassword(name, password);
  return password;
}
