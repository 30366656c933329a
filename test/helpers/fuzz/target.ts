import { rmSync } from "node:fs";
import { join } from "node:path";
import { ensureChatModel } from "../../../models/cache";
import { ensureDiffusionModel } from "../../../models/diffusion/cache";
import { ensureOnnxModel } from "../../../models/onnx/cache";
import { validateConfig } from "../../../src/lib/config";
import { memoryLogger } from "../../../src/lib/log";
import { startServer } from "../../../src/main";
import type { AppDeps } from "../../../src/services";
import { BASE, tempDir, testApp } from "../app";
import { multipartBody } from "./bodies";
import type { FuzzWorld, OpenApiLike } from "./operations";
import { Prng } from "./prng";

// The server the fuzzer attacks: the real app with the tiny generated models of every kind (chat
// through llama.cpp, embeddings and NLI through transformers.js, images through the diffusion
// engine), a rentable GPU node served by the stand-in JupyterLab, and real resources to name (a
// file, a batch, a rental, a console key). In process (app.handle, as the suite's tests call it)
// or over a socket (startServer, as clients see it: Bun.serve's own parsing and limits included).

const FAKE_JUPYTER = join(import.meta.dir, "../../fixtures/rentals/fake-jupyter.ts");
const CONSOLE_ACCOUNT = "fuzzadmin";
const LOGIN_ACCOUNT = "fuzzlogin";
const PASSWORD = "pw-fuzz-0123456789";

export interface FuzzTarget {
  base: string;
  doc: OpenApiLike;
  world: FuzzWorld;
  /** The premium key with the inference and rental scopes every keyed case uses. */
  key: string;
  session: { cookie: string; csrf: string };
  send(req: Request): Promise<Response>;
  /** Signs in again (after a case signed the session out). */
  refreshSession(): Promise<void>;
  /** Error lines the server logged, for one request id or (null) all of them. */
  errors(requestId: string | null): Record<string, any>[];
  close(): Promise<void>;
}

async function fuzzConfig() {
  const [chat, embed, nli, turbo] = await Promise.all([ensureChatModel("chat"), ensureOnnxModel("embed"), ensureOnnxModel("nli"), ensureDiffusionModel("diffusion-turbo")]);
  // Queues deep enough for the bench's concurrent clients: a full queue is a documented 429/503
  // (load shedding), which this fuzzer is not about.
  const common = { slots: 1, queue: 16, load: "first_use" };
  return {
    engines: { device: "cpu", threads: 1 },
    // Small contexts bound what a request that passes validation can make a model do.
    models: [
      { ...common, id: "chat", name: "Fuzz chat", kind: "chat", files: { model: chat }, max_context: 512, slots: 2 },
      { ...common, id: "embed", name: "Fuzz embed", kind: "embedding", files: { model: embed }, max_context: 128 },
      { ...common, id: "nli", name: "Fuzz NLI", kind: "classifier", files: { model: nli }, max_context: 128 },
      { ...common, id: "turbo", name: "Fuzz turbo", kind: "image", files: { model: turbo }, max_context: 77 },
    ],
    retired_models: [{ id: "old-chat", replaced_by: "chat" }],
    rental_nodes: [{ gpu_uuid: "GPU-5f1c2b1e-9d4a-4c3e-8f2a-0a1b2c3d4e5f", gpu: "NVIDIA GeForce RTX 4090", vram_mb: 24564, compute_cap: 8.9, country: "Germany", country_code: "DE", price_per_hour: 0.6, launcher: "process" }],
    rentals: { discover: false, process: { command: [process.execPath, FAKE_JUPYTER], bind: "127.0.0.1" }, public_host: "127.0.0.1", ready_timeout_s: 20 },
  };
}

/** Builds the server, its accounts and resources. `http: true` listens on a port. */
export async function fuzzTarget(o: { http?: boolean } = {}): Promise<FuzzTarget> {
  const config = await fuzzConfig();
  let deps: AppDeps;
  let base = BASE;
  let handle: (req: Request) => Promise<Response>;
  let lines: Record<string, any>[];
  let shutdown: () => Promise<void>;
  if (o.http) {
    const dir = tempDir("appliance-fuzz-");
    const logger = memoryLogger();
    const c = validateConfig({ ...config, server: { data_dir: dir, port: 0, host: "127.0.0.1" } });
    const s = await startServer(c, { logger, banner: () => {} });
    deps = s.deps;
    base = s.url;
    lines = logger.lines;
    handle = (req) => fetch(req, { redirect: "manual" });
    shutdown = async () => {
      // Rentals outlive a server by design; the fuzzer's must not outlive the run.
      for (const r of await deps.rentals.refreshActive()) await deps.rentals.remove((await deps.accounts.principalById(r.key_id))!, r.id).catch(() => {});
      await s.stop({ timeoutMs: 5000 });
      rmSync(dir, { recursive: true, force: true });
    };
  } else {
    const t = testApp({ config });
    deps = t.deps;
    lines = t.logs;
    handle = (req) => t.app.handle(req);
    shutdown = () => t.close();
  }

  try {
    return await prepare(deps, base, handle, lines, shutdown);
  } catch (e) {
    await shutdown();
    throw e;
  }
}

/** Accounts, keys, a session and resources on a started server; the target over them. */
async function prepare(
  deps: AppDeps,
  base: string,
  handle: (req: Request) => Promise<Response>,
  lines: Record<string, any>[],
  shutdown: () => Promise<void>,
): Promise<FuzzTarget> {
  // An admin account, so GET /metrics is reached past its role check too.
  await deps.accounts.createAccount("fuzz", { role: "admin", creditMicros: 1_000_000_000 });
  const key = (await deps.accounts.createKey({ account: "fuzz", kind: "premium", scopes: ["inference", "rental"] })).key;
  await deps.accounts.createAccount(CONSOLE_ACCOUNT, { role: "admin", creditMicros: 1_000_000_000 });
  await deps.console.auth.setPassword(CONSOLE_ACCOUNT, PASSWORD);
  await deps.accounts.createAccount(LOGIN_ACCOUNT, {});
  await deps.console.auth.setPassword(LOGIN_ACCOUNT, PASSWORD);
  const victim = (await deps.accounts.createKey({ account: CONSOLE_ACCOUNT, kind: "premium", name: "victim" })).info.id;

  const call = async (method: string, path: string, body?: string, headers: Record<string, string> = {}) => {
    const res = await handle(new Request(base + path, { method, body, headers: { authorization: `Bearer ${key}`, ...headers } }));
    const text = await res.text();
    if (!res.ok) throw new Error(`fuzz setup: ${method} ${path} → ${res.status} ${text}`);
    return JSON.parse(text);
  };
  const doc = (await call("GET", "/openapi.json")) as OpenApiLike;
  const world: FuzzWorld = {
    models: { chat: ["chat"], embedding: ["embed"], classifier: ["nli"], image: ["turbo"], retired: ["old-chat"] },
    ids: { file: [], batch: [], rental: [], key: [victim], account: [CONSOLE_ACCOUNT, "fuzz", LOGIN_ACCOUNT, "nobody"], node: [], consoleFile: ["index.html", "app.js", "style.css", "nope.js"] },
    loginAccount: LOGIN_ACCOUNT,
  };
  for (const seed of [1, 2]) {
    const upload = multipartBody(new Prng(seed), world, true);
    world.ids.file.push((await call("POST", "/v1/files", upload.body, { "content-type": upload.contentType })).id);
  }
  // A file whose lines carry what the fuzzer sends to the live routes (prototype-named fields, deep
  // nesting, duplicate and odd ids): batches created from it validate and run those lines.
  const hostile = [];
  for (const lines of HOSTILE_LINES) hostile.push((await call("POST", "/v1/files", upload(lines), { "content-type": `multipart/form-data; boundary=${BOUNDARY}` })).id);
  world.ids.file.splice(1, 0, ...hostile);
  const file = { id: world.ids.file[0]! };
  // The worker runs the lines that pass validation (a refusal is fine: then validation saw them).
  await handle(new Request(`${base}/v1/batches`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ input_file_id: hostile[0], endpoint: "/v1/chat/completions", completion_window: "24h" }),
  })).then((r) => r.text());
  const batch = await call("POST", "/v1/batches", JSON.stringify({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" }), { "content-type": "application/json" });
  world.ids.batch.push(batch.id);
  const gpus = await call("GET", "/api/v1/gpus");
  world.ids.node.push(...gpus.data.map((n: { node_id: string }) => n.node_id));
  const rental = await call("POST", "/api/v1/rentals", JSON.stringify({ node_id: world.ids.node[0], type: "jupyter", hours: 1 }), { "content-type": "application/json" });
  world.ids.rental.push(rental.rental_id);

  const session = { cookie: "", csrf: "" };
  const refreshSession = async () => {
    const res = await handle(new Request(`${base}/console/api/login`, {
      method: "POST",
      headers: { "content-type": "application/json", origin: base },
      body: JSON.stringify({ account: CONSOLE_ACCOUNT, password: PASSWORD }),
    }));
    if (!res.ok) throw new Error(`fuzz setup: console sign-in → ${res.status} ${await res.text()}`);
    session.cookie = res.headers.get("set-cookie")!.split(";")[0]!;
    session.csrf = ((await res.json()) as { csrf: string }).csrf;
  };
  await refreshSession();

  return {
    base,
    doc,
    world,
    key,
    session,
    send: handle,
    refreshSession,
    errors: (id) => lines.filter((l) => l.level === "error" && (id === null || l.request_id === id)),
    close: shutdown,
  };
}

const BOUNDARY = "fuzz-hostile-lines";
const line = (id: string, url: string, body: string) => `{"custom_id":${JSON.stringify(id)},"method":"POST","url":"${url}","body":${body}}`;
const CHAT = '"model":"chat","messages":[{"role":"user","content":"hi"}],"max_tokens":4';

/** Files whose lines carry what the fuzzer sends to the live routes: the first may pass validation, the second may not. */
const HOSTILE_LINES = [
  [
    line("ok", "/v1/chat/completions", `{${CHAT}}`),
    line("proto", "/v1/chat/completions", `{"__proto__":{"max_tokens":100000},"toString":1,"constructor":{"prototype":1},${CHAT}}`),
    line("__proto__", "/v1/chat/completions", `{${CHAT}}`),
    line("nested-proto", "/v1/chat/completions", '{"model":"chat","messages":[{"role":"user","content":"hi","__proto__":{"role":"system"},"toString":"x"}],"max_tokens":4}'),
    line("constructor", "/v1/chat/completions", `{${CHAT},"tools":[{"type":"function","function":{"name":"__proto__","parameters":{"type":"object","properties":{"toString":{"type":"string"}}}}}]}`),
  ],
  [
    line("responses-proto", "/v1/responses", '{"model":"chat","input":"hi","max_output_tokens":4,"toString":1,"valueOf":"x","hasOwnProperty":null}'),
    line("embed-proto", "/v1/embeddings", '{"model":"embed","input":["a","b"],"__proto__":{"input":1},"constructor":1}'),
    line("deep", "/v1/chat/completions", `{${CHAT},"metadata":${"[".repeat(3000)}${"]".repeat(3000)}}`),
    line("dup", "/v1/embeddings", '{"model":"embed","input":"a"}'),
    line("dup", "/v1/embeddings", '{"model":"embed","input":"a"}'),
    "{not json",
  ],
];

function upload(lines: string[]): string {
  const file = lines.join("\n") + "\n";
  return `--${BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="hostile.jsonl"\r\n\r\n${file}\r\n--${BOUNDARY}--\r\n`;
}
