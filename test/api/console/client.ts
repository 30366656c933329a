import { BASE, type TestApp } from "../../helpers/app";

// A browser-like client of the console API over app.handle: keeps the session cookie, sends the
// CSRF token on state-changing requests, and the page's Origin.

export interface ConsoleClient {
  cookie: string | null;
  csrf: string | null;
  signIn(account: string, password: string): Promise<Response>;
  call(method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<Response>;
  json<T = any>(method: string, path: string, body?: unknown): Promise<T>;
}

export function consoleClient(t: TestApp): ConsoleClient {
  const c: ConsoleClient = {
    cookie: null,
    csrf: null,
    async signIn(account, password) {
      const res = await c.call("POST", "/console/api/login", { account, password });
      if (res.ok) {
        const setCookie = res.headers.get("set-cookie")!;
        c.cookie = setCookie.split(";")[0]!;
        c.csrf = ((await res.clone().json()) as any).csrf;
      }
      return res;
    },
    call(method, path, body, headers = {}) {
      const h: Record<string, string> = { origin: BASE, ...headers };
      if (c.cookie) h.cookie = c.cookie;
      if (c.csrf && method !== "GET") h["x-csrf-token"] ??= c.csrf;
      if (body !== undefined) h["content-type"] = "application/json";
      return t.app.handle(new Request(BASE + path, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body) }));
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
  t.deps.accounts.createAccount(name, { role: o.admin ? "admin" : "user", creditMicros: o.creditUsd ? Math.round(o.creditUsd * 1e6) : undefined });
  const password = o.password ?? `pw-${name}-0123456789`;
  await t.deps.console.auth.setPassword(name, password);
  return password;
}
