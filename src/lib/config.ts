import { Type as T, type Static, type TSchema } from "@sinclair/typebox";
import { Value } from "@sinclair/typebox/value";
import { existsSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, isAbsolute, join, resolve } from "node:path";
import { manifestProblems, ModelManifest, RetiredModel } from "./manifest";
import { trustedProxyProblem } from "./net/trusted-proxies";

// One TypeBox schema for the whole config, validated once at start. Sources, lowest first:
// built-in defaults < TOML file < environment (APPLIANCE_*) < command-line flags.

const Server = T.Object(
  {
    host: T.String({ default: "127.0.0.1", minLength: 1 }),
    port: T.Integer({ default: 8484, minimum: 0, maximum: 65535 }),
    data_dir: T.String({ default: "", description: "empty → $XDG_DATA_HOME/appliance or ~/.local/share/appliance" }),
    log_level: T.Union([T.Literal("debug"), T.Literal("info"), T.Literal("warn"), T.Literal("error")], { default: "info" }),
    max_body_mb: T.Number({ default: 64, exclusiveMinimum: 0 }),
    shutdown_timeout_s: T.Number({ default: 30, minimum: 0, description: "on SIGTERM, how long running requests may take to finish" }),
    // A request body's pace (src/lib/net/body-pace.ts): a body that falls behind is answered 408 and its connection closed.
    body_grace_s: T.Number({ default: 10, exclusiveMinimum: 0, description: "seconds a request body may take before body_min_bytes_per_s applies" }),
    body_min_bytes_per_s: T.Integer({
      default: 16384,
      minimum: 1,
      description: "after body_grace_s, a request body must have averaged at least this many bytes a second since its head, until it is complete",
    }),
    max_requests_per_address: T.Integer({
      default: 256,
      minimum: 0,
      description: "requests in flight (bodies still arriving included) per client address, IPv6 per /64; beyond it 429 at once; 0 = no cap",
    }),
    metrics_listen: T.String({
      default: "",
      pattern: "^$|^(\\[[0-9A-Fa-f:.]+\\]|[^\\s:\\[\\]]+):[0-9]{1,5}$",
      description: 'a second listener serving GET /metrics with no key, "host:port" (e.g. "127.0.0.1:9464"); empty = off',
    }),
    tls: T.Optional(
      T.Object(
        {
          cert: T.String({ minLength: 1, description: "PEM certificate file: the server's certificate, then its chain (appliance tls init writes one)" }),
          key: T.String({ minLength: 1, description: "PEM private key file of that certificate" }),
          redirect_port: T.Integer({
            default: 0,
            minimum: 0,
            maximum: 65535,
            description: "a plain-HTTP listener on this port that redirects to HTTPS and serves /health; 0 = none",
          }),
        },
        { additionalProperties: false, description: "HTTPS on the main port with Bun's own TLS; files re-read on SIGHUP" },
      ),
    ),
    trusted_proxies: T.Array(T.String({ minLength: 1 }), {
      default: [],
      description:
        'reverse proxies in front of the server ("127.0.0.1", "10.0.0.0/8", "::1"): from these peers only, the client is the right-most X-Forwarded-For address that is not listed; empty = X-Forwarded-For is never read',
    }),
    allowed_hosts: T.Array(T.String({ minLength: 1 }), {
      default: [],
      description:
        'more Host names the web console answers to ("name", "*.suffix", "*" = any) besides IP literals, localhost, *.local, this machine\'s hostname, server.host and rentals.public_host',
    }),
  },
  { additionalProperties: false, default: {} },
);

const Limits = T.Object(
  {
    free_trial_tokens: T.Integer({ default: 250_000, minimum: 0 }),
    free_rpm: T.Integer({ default: 20, minimum: 1 }),
    free_images_per_day: T.Integer({ default: 5, minimum: 0 }),
    free_images_per_minute: T.Integer({ default: 2, minimum: 0 }),
    premium_images_per_day: T.Integer({ default: 300, minimum: 0 }),
    premium_images_per_minute: T.Integer({ default: 0, minimum: 0, description: "0 = no per-minute image cap" }),
    premium_rpm: T.Integer({ default: 0, minimum: 0, description: "default rpm cap for premium keys; 0 = none" }),
    premium_inflight: T.Integer({ default: 0, minimum: 0, description: "default in-flight cap for premium keys; 0 = none" }),
    max_active_rentals: T.Integer({ default: 1, minimum: 0, description: "default per-key cap on active rentals" }),
  },
  { additionalProperties: false, default: {} },
);

const Prices = T.Object(
  {
    chat_input_per_m: T.Number({ default: 0.12, minimum: 0 }),
    chat_output_per_m: T.Number({ default: 1.7, minimum: 0 }),
    classifier_input_per_m: T.Number({ default: 0.05, minimum: 0 }),
    decision_input_per_m: T.Number({ default: 0.05, minimum: 0, description: "/v1/decisions input tokens on a chat model (its manifest's price.decision_input_per_m overrides)" }),
    reranker_input_per_m: T.Number({ default: 0.02, minimum: 0, description: "/v1/rerank input tokens (query + document per pair)" }),
    embedding_input_per_m: T.Number({ default: 0.02, minimum: 0 }),
    image_per_image: T.Number({ default: 0.003, minimum: 0 }),
    batch_discount: T.Number({ default: 0.5, minimum: 0, maximum: 1, description: "fraction of the live price batches pay" }),
  },
  { additionalProperties: false, default: {} },
);

const RentalNode = T.Object(
  {
    gpu_uuid: T.Optional(T.String({ minLength: 1 })),
    gpu: T.String({ minLength: 1, description: "GPU model name" }),
    vram_mb: T.Integer({ minimum: 1 }),
    compute_cap: T.Number({ minimum: 0 }),
    country: T.String({ minLength: 1 }),
    country_code: T.String({ minLength: 2, maxLength: 3 }),
    price_per_hour: T.Number({ minimum: 0 }),
    launcher: T.Union([T.Literal("process"), T.Literal("docker")], { default: "process", description: "how the node starts a rental" }),
  },
  { additionalProperties: false },
);

const Rentals = T.Object(
  {
    public_host: T.String({ default: "", description: "host or IP rental owners connect to; empty → server.host, or this machine's hostname when that is 0.0.0.0" }),
    access: T.Union([T.Literal("proxy"), T.Literal("direct")], {
      default: "proxy",
      description:
        "proxy: a rental's notebook listens on loopback and is reached through this port at /rentals/{rental_id}/ (HTTPS when server.tls is set); direct: on its own port (rentals.process.bind, or one Docker publishes)",
    }),
    share_gpus: T.Boolean({
      default: true,
      description: "a GPU is rentable while only idle on-demand models hold it (they are unloaded first); false: while any model is loaded on it",
    }),
    notebook_sources: T.Array(T.String({ minLength: 1, pattern: "^(https?|wss?)://[^\\s;,']+$" }), {
      default: [],
      description: "proxy mode: origins a notebook page may also load scripts from and connect to (e.g. https://cdn.jsdelivr.net); the appliance's own paths outside the rental stay closed",
    }),
    discover: T.Boolean({ default: true, description: "offer this host's GPUs found by nvidia-smi (those with a price)" }),
    price_per_hour: T.Optional(T.Number({ minimum: 0, description: "price of discovered GPUs not declared in rental_nodes; unset → not rentable" })),
    country: T.String({ default: "", description: "country of discovered GPUs" }),
    country_code: T.String({ default: "", description: "country code of discovered GPUs" }),
    launcher: T.Union([T.Literal("process"), T.Literal("docker")], { default: "process", description: "launcher of discovered GPUs" }),
    max_hours: T.Number({ default: 720, exclusiveMinimum: 0, description: "largest `hours` a rental may ask for" }),
    ready_timeout_s: T.Integer({ default: 180, minimum: 1, description: "a launch not answering by then fails" }),
    process: T.Object(
      {
        command: T.Array(T.String({ minLength: 1 }), { default: ["jupyter", "lab"], minItems: 1 }),
        bind: T.String({ default: "0.0.0.0" }),
      },
      { additionalProperties: false, default: {} },
    ),
    docker: T.Object(
      {
        socket: T.String({ default: "/var/run/docker.sock" }),
        image: T.String({ default: "quay.io/jupyter/pytorch-notebook:cuda12-latest" }),
      },
      { additionalProperties: false, default: {} },
    ),
  },
  { additionalProperties: false, default: {} },
);

const Engines = T.Object(
  {
    device: T.Union([T.Literal("auto"), T.Literal("cpu"), T.Literal("cuda"), T.Literal("vulkan")], {
      default: "auto",
      description:
        "auto: CUDA when an NVIDIA device is present and usable, else Vulkan (chat models) when a Vulkan GPU is present and usable, else CPU",
    }),
    threads: T.Integer({ default: 0, minimum: 0, description: "compute threads per model; 0 = one per CPU core" }),
    keep_alive_s: T.Integer({ default: 300, minimum: -1, description: "seconds an idle on-demand model (load = \"first_use\") stays loaded; 0: unloaded as soon as idle; -1: until its memory is needed" }),
    gpu_memory_mb: T.Integer({ default: 0, minimum: 0, description: "most GPU memory the models may hold on each GPU; 0: the GPU's own" }),
    cpu_memory_mb: T.Integer({ default: 0, minimum: 0, description: "most host memory the models may hold; 0: the host's own" }),
  },
  { additionalProperties: false, default: {} },
);

const ImageInput = T.Object(
  {
    allow_private_urls: T.Boolean({ default: false, description: "let image URLs reach loopback, private and link-local addresses" }),
    allow_http_urls: T.Boolean({ default: false, description: "accept http:// image URLs besides https://" }),
    fetch_timeout_s: T.Number({ default: 10, exclusiveMinimum: 0, description: "whole fetch of one image URL" }),
    max_bytes: T.Integer({ default: 20 * 1024 * 1024, minimum: 1024, description: "largest image accepted, data URL or fetched" }),
    max_side: T.Integer({ default: 2048, minimum: 64, description: "larger images are scaled down to fit this many pixels a side" }),
  },
  { additionalProperties: false, default: {} },
);

// Client compatibility switches that go beyond the contract, for operators who want a client unmodified.
const Compat = T.Object(
  {
    ignore_hosted_tools: T.Boolean({
      default: false,
      description:
        "accept and ignore hosted tools (Responses built-ins such as web_search, Messages server tools such as web_search_*) instead of the contract's 400 naming tools[n]; none runs here either way",
    }),
  },
  { additionalProperties: false, default: {} },
);

// Storage for /v1/files (issue 41 M4): a key could otherwise fill the disk with uploads.
const Files = T.Object(
  {
    quota_mb: T.Integer({
      default: 10240,
      minimum: 0,
      description:
        "MiB an account's live files (uploads and batch results) may hold; an upload past it is refused (413 storage_quota_exceeded); batch results are always written; 0 = no quota",
    }),
    min_free_disk_mb: T.Integer({
      default: 1024,
      minimum: 0,
      description: "MiB of free space uploads must leave on the data dir's filesystem, else refused (507 insufficient_storage); 0 = no floor",
    }),
  },
  { additionalProperties: false, default: {} },
);

// Message threads on /v1/messages (issue 42): conversations held between turns, per key, in the store.
const Threads = T.Object(
  {
    enabled: T.Boolean({
      default: true,
      description:
        "keep message threads (`thread` on /v1/messages); false: create is 400 thread_unsupported_request and continue 404 thread_not_found, after which the Anthropic SDK sends the whole conversation",
    }),
    ttl_s: T.Integer({ default: 86400, minimum: 60, description: "a thread not continued for this many seconds is deleted (its continue answers thread_not_found)" }),
    max_per_key: T.Integer({ default: 100, minimum: 1, description: "threads one key holds; past it the least recently used is deleted" }),
    max_mb_per_key: T.Number({
      default: 64,
      exclusiveMinimum: 0,
      description: "MiB one key's threads hold (messages, system, tools, images inline); past it the least recently used are deleted; one thread holds at most this and server.max_body_mb",
    }),
  },
  { additionalProperties: false, default: {} },
);

// Where the appliance keeps its state (issue 44): SQLite in the data dir, or one PostgreSQL that
// several appliance processes share.
const Store = T.Object(
  {
    url: T.String({
      default: "",
      pattern: "^(|postgres(ql)?://.+)$",
      description: "postgres://USER[:PASSWORD]@HOST:PORT/DB to keep the state in PostgreSQL; empty: SQLite in server.data_dir (env APPLIANCE_STORE_URL)",
    }),
  },
  { additionalProperties: false, default: {} },
);

// Several appliance processes on one PostgreSQL store are nodes of one cluster (issue 45).
const Cluster = T.Object(
  {
    advertise_url: T.String({
      default: "",
      pattern: "^(|https?://[^\\s/]+)$",
      description: "how other nodes reach this one (http(s)://host:port; `{port}` stands for the port it listens on); required with a PostgreSQL store (env APPLIANCE_ADVERTISE_URL)",
    }),
    secret: T.String({
      default: "",
      description: "the secret every node of the cluster shares, at least 32 characters: it signs the hops between nodes; required with a PostgreSQL store (or secret_file; env APPLIANCE_CLUSTER_SECRET)",
    }),
    secret_file: T.String({ default: "", description: "a file holding the cluster's secret (read at start; trailing whitespace ignored)" }),
  },
  { additionalProperties: false, default: {} },
);

const Bootstrap = T.Object(
  {
    account: T.String({ default: "admin", minLength: 1 }),
    credit_usd: T.Number({ default: 10, minimum: 0, description: "credit given to the first account's premium key" }),
  },
  { additionalProperties: false, default: {} },
);

export const Config = T.Object(
  {
    server: Server,
    limits: Limits,
    prices: Prices,
    engines: Engines,
    models_dir: T.String({ default: "", description: "base for relative model file paths; empty → the config file's folder" }),
    models: T.Array(ModelManifest, { default: [] }),
    retired_models: T.Array(RetiredModel, { default: [] }),
    rental_nodes: T.Array(RentalNode, { default: [] }),
    rentals: Rentals,
    image_input: ImageInput,
    files: Files,
    compat: Compat,
    threads: Threads,
    store: Store,
    cluster: Cluster,
    bootstrap: Bootstrap,
    demo: T.Boolean({ default: false, description: "serve the tiny generated demo models" }),
  },
  { additionalProperties: false },
);
export type Config = Static<typeof Config>;

/** The [compat] settings as a reader looks them up per request (SIGHUP applies them in place). */
export type CompatSettings = () => Config["compat"];

export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ConfigError";
  }
}

export interface ConfigOverrides {
  host?: string;
  port?: number | string;
  dataDir?: string;
  demo?: boolean;
}

export interface LoadedConfig {
  config: Config;
  /** The file read, or null when running on defaults. */
  file: string | null;
}

/** Where the config comes from: --config, else $APPLIANCE_CONFIG, else the XDG default if it exists. */
export function findConfigFile(flag: string | undefined, env: Record<string, string | undefined>): string | null {
  if (flag) return resolve(flag);
  if (env.APPLIANCE_CONFIG) return resolve(env.APPLIANCE_CONFIG);
  const base = env.XDG_CONFIG_HOME || join(env.HOME || homedir(), ".config");
  const path = join(base, "appliance", "config.toml");
  return existsSync(path) ? path : null;
}

export function loadConfig(
  opts: { file?: string; flags?: ConfigOverrides; env?: Record<string, string | undefined> } = {},
): LoadedConfig {
  const env = opts.env ?? process.env;
  const file = findConfigFile(opts.file, env);
  let raw: Record<string, any> = {};
  if (file) {
    if (!existsSync(file)) throw new ConfigError(`config file not found: ${file}`);
    try {
      raw = Bun.TOML.parse(readFileSync(file, "utf8")) as Record<string, any>;
    } catch (e) {
      throw new ConfigError(`${file}: ${(e as Error).message}`);
    }
  }
  const server = (raw.server ??= {});
  if (typeof server !== "object" || Array.isArray(server)) throw new ConfigError("server: must be a table");
  applyOverride(server, "data_dir", env.APPLIANCE_DATA_DIR);
  applyOverride(server, "host", env.APPLIANCE_HOST);
  applyOverride(server, "port", numeric(env.APPLIANCE_PORT));
  applyOverride(server, "log_level", env.APPLIANCE_LOG_LEVEL);
  const flags = opts.flags ?? {};
  applyOverride(server, "data_dir", flags.dataDir);
  applyOverride(server, "host", flags.host);
  applyOverride(server, "port", numeric(flags.port));
  if (flags.demo) raw.demo = true;
  if (env.APPLIANCE_STORE_URL) {
    const store = (raw.store ??= {});
    if (typeof store !== "object" || Array.isArray(store)) throw new ConfigError("store: must be a table");
    applyOverride(store, "url", env.APPLIANCE_STORE_URL);
  }
  if (env.APPLIANCE_ADVERTISE_URL || env.APPLIANCE_CLUSTER_SECRET) {
    const cluster = (raw.cluster ??= {});
    if (typeof cluster !== "object" || Array.isArray(cluster)) throw new ConfigError("cluster: must be a table");
    applyOverride(cluster, "advertise_url", env.APPLIANCE_ADVERTISE_URL);
    applyOverride(cluster, "secret", env.APPLIANCE_CLUSTER_SECRET);
  }

  const config = validateConfig(raw, file ?? "config");
  config.server.data_dir = resolveDataDir(config.server.data_dir, env);
  // Relative paths in the file are relative to the file's folder (to the working directory without one).
  const base = file ? dirname(file) : process.cwd();
  config.models_dir = config.models_dir ? resolve(base, expandHome(config.models_dir, env)) : base;
  if (config.cluster.secret_file) config.cluster.secret_file = resolve(base, expandHome(config.cluster.secret_file, env));
  if (config.server.tls) {
    config.server.tls.cert = resolve(base, expandHome(config.server.tls.cert, env));
    config.server.tls.key = resolve(base, expandHome(config.server.tls.key, env));
  }
  return { config, file };
}

/** Fill defaults and validate; every problem is reported with the dotted path of the field. */
export function validateConfig(raw: unknown, source = "config"): Config {
  const value = Value.Default(Config, Value.Clone(raw ?? {}));
  const problems = describeErrors(Config, value);
  if (problems.length) throw new ConfigError(`${source}: invalid configuration\n  ${problems.join("\n  ")}`);
  const config = value as Config;
  const ids = new Set<string>();
  config.models.forEach((m, i) => {
    if (ids.has(m.id)) throw new ConfigError(`${source}: models[${i}].id: duplicate model id "${m.id}"`);
    ids.add(m.id);
    if (m.kind === "chat" && !m.files.model) throw new ConfigError(`${source}: models[${i}].files.model: a chat model needs a model file`);
    if (m.vision && (m.kind !== "chat" || !m.files.mmproj))
      throw new ConfigError(`${source}: models[${i}].files.mmproj: a vision model is a chat model with its projector file (mmproj GGUF)`);
    if (m.files.mmproj && !m.vision) throw new ConfigError(`${source}: models[${i}].vision: a model with an mmproj file must set vision = true`);
    for (const p of manifestProblems(m)) throw new ConfigError(`${source}: models[${i}].${p.field}: ${p.message}`);
  });
  config.retired_models.forEach((r, i) => {
    if (ids.has(r.id)) throw new ConfigError(`${source}: retired_models[${i}].id: "${r.id}" is also a served model`);
    if (r.replaced_by && !ids.has(r.replaced_by))
      throw new ConfigError(`${source}: retired_models[${i}].replaced_by: "${r.replaced_by}" is not a served model`);
  });
  config.server.trusted_proxies.forEach((entry, i) => {
    const problem = trustedProxyProblem(entry);
    if (problem) throw new ConfigError(`${source}: server.trusted_proxies[${i}]: ${problem}`);
  });
  const gpus = new Map<string, number>();
  config.rental_nodes.forEach((n, i) => {
    if (n.gpu_uuid === undefined) return;
    const uuid = n.gpu_uuid.trim().toLowerCase();
    const earlier = gpus.get(uuid);
    if (earlier !== undefined) throw new ConfigError(`${source}: rental_nodes[${i}].gpu_uuid: "${n.gpu_uuid}" is also declared by rental_nodes[${earlier}]`);
    gpus.set(uuid, i);
  });
  return config;
}

export function describeErrors(schema: TSchema, value: unknown): string[] {
  const seen = new Set<string>();
  const out: string[] = [];
  for (const err of Value.Errors(schema, value)) {
    const field = pointerToDotted(err.path) || "(root)";
    if (seen.has(field)) continue;
    seen.add(field);
    const unknown = err.message.startsWith("Unexpected property");
    out.push(unknown ? `${field}: unknown field` : `${field}: ${err.message}`);
  }
  return out;
}

/** JSON pointer "/models/0/files" → "models[0].files". */
export function pointerToDotted(pointer: string): string {
  return pointer
    .split("/")
    .slice(1)
    .map((p) => p.replace(/~1/g, "/").replace(/~0/g, "~"))
    .reduce((acc, part) => (/^\d+$/.test(part) ? `${acc}[${part}]` : acc ? `${acc}.${part}` : part), "");
}

function applyOverride(target: Record<string, unknown>, key: string, value: unknown) {
  if (value !== undefined && value !== "") target[key] = value;
}

function numeric(v: string | number | undefined): number | string | undefined {
  if (v === undefined || typeof v === "number") return v;
  return /^\d+$/.test(v) ? Number(v) : v;
}

function expandHome(p: string, env: Record<string, string | undefined>): string {
  return p === "~" || p.startsWith("~/") ? join(env.HOME || homedir(), p.slice(1)) : p;
}

function resolveDataDir(dir: string, env: Record<string, string | undefined>): string {
  if (dir) return isAbsolute(expandHome(dir, env)) ? expandHome(dir, env) : resolve(expandHome(dir, env));
  const base = env.XDG_DATA_HOME || join(env.HOME || homedir(), ".local", "share");
  return join(base, "appliance");
}
