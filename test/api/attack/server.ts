import { Database } from "bun:sqlite";
import { expect } from "bun:test";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ensureChatModel } from "../../../models/cache";
import { ensureOnnxModel } from "../../../models/onnx/cache";
import { tempDir } from "../../helpers/app";
import { cli, serveCli } from "../../helpers/cli";

// The outside attack of issue 41, replayed against a real server process: each request that once
// crashed, wedged or froze the appliance is sent, and while it runs another user's requests must
// be answered within a bound; afterwards the process is alive and the attack got a named 4xx.

export interface AttackServer {
  url: string;
  /** The attacker's key (premium, with credit: the rpm of a free key would cut the suite short). */
  attacker: string;
  /** Another user's key. */
  other: string;
  dir: string;
  pid: number;
  /** What the server wrote on stdout (its JSON log lines) so far. */
  log(): string;
  /** Its resident memory, in MB. */
  rssMb(): number;
  alive(): boolean;
  /** The data dir's store, read-only, while the server runs. */
  store(): Database;
  stop(): Promise<void>;
}

export async function startAttackServer(o: { toml?: string } = {}): Promise<AttackServer> {
  const dir = tempDir("appliance-attack-");
  const chat = await ensureChatModel("chat");
  const small = await ensureChatModel("small-chat");
  const [embed, nli] = await Promise.all([ensureOnnxModel("embed"), ensureOnnxModel("nli")]);
  const config = join(dir, "config.toml");
  writeFileSync(
    config,
    [
      `[server]`,
      `log_level = "info"`,
      `shutdown_timeout_s = 3`,
      `[engines]`,
      `device = "cpu"`,
      `threads = 1`,
      `[rentals]`,
      `discover = false`,
      `[[models]]`,
      `id = "chat"`,
      `name = "chat"`,
      `kind = "chat"`,
      `files = { model = "${chat}" }`,
      `max_context = 4096`,
      `slots = 2`,
      `load = "start"`,
      // a long context in short steps: a long prompt takes seconds to decode (the cancel test)
      `[[models]]`,
      `id = "long"`,
      `name = "long"`,
      `kind = "chat"`,
      `files = { model = "${small}" }`,
      `max_context = 16384`,
      `slots = 2`,
      `batch_size = 8`,
      `load = "start"`,
      `[[models]]`,
      `id = "embed"`,
      `name = "embed"`,
      `kind = "embedding"`,
      `files = { model = "${embed}" }`,
      `max_context = 512`,
      `[[models]]`,
      `id = "nli"`,
      `name = "nli"`,
      `kind = "classifier"`,
      `files = { model = "${nli}" }`,
      `max_context = 8192`,
      o.toml ?? "",
    ].join("\n"),
  );
  const env = { APPLIANCE_CONFIG: config };
  for (const account of ["attacker", "other"]) expect(cli(dir, ["accounts", "create", account, "--credit", "100"], env).code).toBe(0);
  const key = (account: string) => {
    const r = cli(dir, ["keys", "create", "--account", account, "--premium", "--json"], env);
    expect(r.code).toBe(0);
    return r.json().key as string;
  };
  const attacker = key("attacker");
  const other = key("other");
  const { child, url } = await serveCli(dir, ["--port", "0"], env);
  const out: string[] = [];
  void (async () => {
    for await (const chunk of child.stdout as ReadableStream<Uint8Array>) out.push(new TextDecoder().decode(chunk));
  })();
  void (async () => {
    for await (const _ of child.stderr as ReadableStream<Uint8Array>);
  })();
  let db: Database | null = null;
  return {
    url,
    attacker,
    other,
    dir,
    pid: child.pid,
    log: () => out.join(""),
    rssMb: () => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${child.pid}/status`, "utf8"))![1]) / 1024,
    alive: () => child.exitCode === null && child.signalCode === null,
    store: () => (db ??= new Database(join(dir, "appliance.sqlite"), { readonly: true })),
    async stop() {
      db?.close();
      child.kill("SIGKILL");
      await child.exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export function post(s: AttackServer, path: string, body: unknown, key = s.attacker, init: RequestInit = {}): Promise<Response> {
  return fetch(`${s.url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "anthropic-version": "2023-06-01" },
    body: typeof body === "string" ? body : JSON.stringify(body),
    ...init,
  });
}

/** Another user's small requests, one after another, while `during` runs: the slowest one's seconds. */
export async function whileOthersAsk<T>(s: AttackServer, during: () => Promise<T>, model = "chat"): Promise<{ value: T; slowestS: number; answered: number }> {
  let done = false;
  let slowest = 0;
  let answered = 0;
  const others = (async () => {
    while (!done) {
      const started = performance.now();
      const [models, chat] = await Promise.all([
        fetch(`${s.url}/v1/models`, { headers: { authorization: `Bearer ${s.other}` } }),
        post(s, "/v1/chat/completions", { model, max_tokens: 4, temperature: 0, messages: [{ role: "user", content: "hi" }] }, s.other),
      ]);
      expect(models.status).toBe(200);
      expect(chat.status).toBe(200);
      await chat.text();
      slowest = Math.max(slowest, (performance.now() - started) / 1000);
      answered++;
      await Bun.sleep(100);
    }
  })();
  try {
    const value = await during();
    return { value, slowestS: slowest, answered };
  } finally {
    done = true;
    await others;
  }
}

/** The answer's status and error code (OpenAI's `code`, or Anthropic's `error.type`). */
export async function errorOf(res: Response): Promise<{ status: number; code: string | null; message: string }> {
  const text = await res.text();
  let body: any = {};
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON: the status says it
  }
  return { status: res.status, code: body?.error?.code ?? body?.error?.type ?? null, message: body?.error?.message ?? text.slice(0, 200) };
}
