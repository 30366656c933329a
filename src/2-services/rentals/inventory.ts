import { Type as T, type Static } from "@sinclair/typebox";
import { createHash } from "node:crypto";
import { ConfigError, type Config } from "../../lib/config";

// The GPU nodes this appliance can rent out: what `rental_nodes` in the config declares, completed by
// what nvidia-smi sees on this host. Parsing and merging are pure; only discoverGpus runs a process.

export type RentalNodeConfig = Config["rental_nodes"][number];

/** One GPU as nvidia-smi reports it. vram_mb is memory.total in MiB; compute_cap 0 = unknown. */
export interface DiscoveredGpu {
  uuid: string;
  name: string;
  vram_mb: number;
  compute_cap: number;
  index: number;
}

export interface Discovery {
  gpus: DiscoveredGpu[];
  /** One line saying what could not be trusted (and was skipped), or null when all was well. */
  problem: string | null;
}

export interface RentalNode {
  node_id: string;
  /** GPU model name, e.g. "NVIDIA GeForce RTX 4090". */
  gpu: string;
  /** The GPU(s) handed to the launcher; empty for a declared node that names no gpu_uuid. */
  gpu_uuids: string[];
  vram_mb: number;
  compute_cap: number;
  country: string;
  country_code: string;
  /** USD per hour; null = not rentable (listed so `doctor` can show why). */
  price_per_hour: number | null;
  launcher: string;
}

export type RentableNode = RentalNode & { price_per_hour: number };

/** An item of GET /api/v1/gpus. `gpu_model` is our name for the spec's "GPU model". */
export const GpuEntry = T.Object(
  {
    node_id: T.String({ pattern: "^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$" }),
    gpu_model: T.String(),
    vram_mb: T.Integer({ minimum: 1 }),
    compute_cap: T.Number({ minimum: 0 }),
    country: T.String(),
    country_code: T.String(),
    price_per_hour: T.Number({ minimum: 0 }),
    /** On a cluster (PostgreSQL): the appliance node that launches rentals of it (src/2-services/rentals/cluster.ts). */
    cluster_node: T.Optional(T.String()),
  },
  { additionalProperties: false },
);
export type GpuEntry = Static<typeof GpuEntry>;

export type CommandRunner = (cmd: string[]) => Promise<{ code: number; stdout: string; stderr: string }>;

// ---- nvidia-smi -------------------------------------------------------------------------------

const FIELDS = ["uuid", "name", "memory.total", "compute_cap", "index"];
const FIELDS_WITHOUT_CC = ["uuid", "name", "memory.total", "index"];
const query = (fields: string[]) => ["nvidia-smi", `--query-gpu=${fields.join(",")}`, "--format=csv,noheader,nounits"];

/** nvidia-smi prints GPU UUIDs as "GPU-" + 8-4-4-4-12 hex digits. */
const GPU_UUID = /^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const CC_REJECTED = /Field "compute_cap" is not a valid field to query/i;
export const NO_COMPUTE_CAP = "this driver cannot report compute_cap; set it in config";

/** What the one-line problem adds for the failures an operator meets most. */
const HINTS: [RegExp, string][] = [
  [/Driver\/library version mismatch/i, "the loaded kernel module and the driver libraries differ; reboot or reload the nvidia module"],
  [/couldn't communicate with the NVIDIA driver/i, "the NVIDIA kernel module is not loaded"],
];

/**
 * Parses `nvidia-smi --query-gpu=uuid,name,memory.total,compute_cap,index --format=csv,noheader,nounits`
 * (or, with `withComputeCap` false, the same query without compute_cap). Never throws: a line that
 * cannot be trusted is skipped and named in `problem`.
 */
export function parseNvidiaSmi(stdout: string, withComputeCap = true): Discovery {
  const lines = stdout.split(/\r?\n/).map((l) => l.trim());
  const gpus: DiscoveredGpu[] = [];
  const problems: string[] = [];
  lines.forEach((line, i) => {
    if (!line) return;
    const parsed = parseLine(line, withComputeCap);
    if (typeof parsed === "string") {
      problems.push(`line ${i + 1}: ${parsed}`);
    } else if (gpus.some((g) => sameGpu(g.uuid, parsed.uuid))) {
      problems.push(`line ${i + 1}: ${parsed.uuid} listed twice; skipped`);
    } else {
      gpus.push(parsed);
    }
  });
  if (!gpus.length && !problems.length) return { gpus, problem: "nvidia-smi listed no GPUs" };
  // No row at all: the output is an error message (driver mismatch, no driver, rejected field), not a table.
  if (!lines.some((l) => /^GPU-/i.test(l))) return { gpus, problem: `nvidia-smi: ${withHint(firstLine(stdout))}` };
  return { gpus, problem: summarise(problems) };
}

function parseLine(line: string, withComputeCap: boolean): DiscoveredGpu | string {
  const fields = withComputeCap ? FIELDS : FIELDS_WITHOUT_CC;
  // nvidia-smi does not quote: the uuid comes first and the trailing fields are numbers, so any comma
  // inside the name is put back by joining the middle.
  const parts = line.split(",").map((p) => p.trim());
  const numeric = fields.length - 2;
  if (parts.length < fields.length) {
    return `expected ${fields.length} fields (${fields.join(", ")}), got ${parts.length}: "${clip(line)}"`;
  }
  const uuid = parts[0]!;
  const name = parts.slice(1, parts.length - numeric).join(", ");
  const tail = parts.slice(parts.length - numeric);
  const [memory, cc, index] = withComputeCap ? tail : [tail[0], "0", tail[1]];
  if (!GPU_UUID.test(uuid)) return `uuid is "${clip(uuid)}", not a GPU UUID; skipped`;
  const unknown = (field: string, value: string | undefined) => `${uuid}: ${field} is ${value || "empty"}; skipped`;
  if (!name || bracketed(name)) return unknown("name", name);
  if (!/^\d+$/.test(memory ?? "") || Number(memory) < 1) return unknown("memory.total", memory);
  if (!/^\d+(\.\d+)?$/.test(cc ?? "")) return unknown("compute_cap", cc);
  if (!/^\d+$/.test(index ?? "")) return unknown("index", index);
  return { uuid, name, vram_mb: Number(memory), compute_cap: Number(cc), index: Number(index) };
}

/** "[N/A]", "[Not Supported]", "[Unknown Error]", "[Insufficient Permissions]": nvidia-smi's "no value". */
const bracketed = (v: string) => /^\[.*\]$/.test(v);
const sameGpu = (a: string, b: string) => a.toLowerCase() === b.toLowerCase();

function summarise(problems: string[]): string | null {
  if (!problems.length) return null;
  const more = problems.length - 1;
  return more ? `${problems[0]} (and ${more} more problem${more > 1 ? "s" : ""})` : problems[0]!;
}

function firstLine(text: string): string {
  return clip(text.split(/\r?\n/).find((l) => l.trim())?.trim() ?? "");
}

function withHint(line: string): string {
  const hint = HINTS.find(([re]) => re.test(line));
  return hint ? `${line} (${hint[1]})` : line;
}

function clip(s: string, max = 160): string {
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}

/** Runs a command with a 5 s limit; a missing executable throws with `code: "ENOENT"`. */
export const spawnRunner: CommandRunner = async (cmd) => {
  const proc = Bun.spawn(cmd, { stdout: "pipe", stderr: "pipe", stdin: "ignore", timeout: 5_000 });
  const [stdout, stderr, code] = await Promise.all([
    new Response(proc.stdout).text(),
    new Response(proc.stderr).text(),
    proc.exited,
  ]);
  if (proc.signalCode) throw Object.assign(new Error(`${cmd[0]} did not finish within 5 s`), { code: "ETIMEDOUT" });
  return { code, stdout, stderr };
};

/**
 * Asks nvidia-smi which GPUs this host has. Drivers before compute_cap existed (R470 and older)
 * refuse the whole query, so it is asked again without that field. A non-zero exit yields no GPUs:
 * a driver in that state cannot be trusted to run a rental.
 */
export async function discoverGpus(run: CommandRunner = spawnRunner): Promise<Discovery> {
  const first = await attempt(run, FIELDS);
  if (typeof first === "string") return { gpus: [], problem: first };
  if (CC_REJECTED.test(first.stdout + first.stderr)) {
    const second = await attempt(run, FIELDS_WITHOUT_CC);
    if (typeof second === "string") return { gpus: [], problem: second };
    if (second.code !== 0) return { gpus: [], problem: failed(second) };
    const found = parseNvidiaSmi(second.stdout, false);
    return { gpus: found.gpus, problem: found.problem ? `${NO_COMPUTE_CAP}; ${found.problem}` : NO_COMPUTE_CAP };
  }
  if (first.code !== 0) return { gpus: [], problem: failed(first) };
  return parseNvidiaSmi(first.stdout);
}

async function attempt(run: CommandRunner, fields: string[]) {
  try {
    return await run(query(fields));
  } catch (e) {
    if ((e as { code?: string }).code === "ENOENT") return "nvidia-smi not found: no NVIDIA driver on this host";
    return `nvidia-smi could not run: ${(e as Error).message}`;
  }
}

function failed(r: { code: number; stdout: string; stderr: string }): string {
  const line = firstLine(r.stdout) || firstLine(r.stderr) || "no output";
  return `nvidia-smi exited with ${r.code}: ${withHint(line)}`;
}

// ---- node ids ---------------------------------------------------------------------------------

/** Namespace of every node id (a random v4 UUID fixed once; changing it renames every node). */
export const NODE_ID_NAMESPACE = "21f9b24f-74ec-4626-b22f-34dcb8012693";

/** RFC 4122 §4.3 name-based UUID, version 5 (SHA-1). */
export function uuidV5(name: string, namespace: string): string {
  const ns = Buffer.from(namespace.replace(/-/g, ""), "hex");
  if (ns.length !== 16) throw new Error(`not a UUID: ${namespace}`);
  const hash = createHash("sha1").update(ns).update(name, "utf8").digest();
  hash[6] = (hash[6]! & 0x0f) | 0x50; // version 5
  hash[8] = (hash[8]! & 0x3f) | 0x80; // variant 10xx
  const hex = hash.subarray(0, 16).toString("hex");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/**
 * The node id for a GPU: the same string gives the same id on every start and every host. GPU
 * UUIDs are globally unique, so ids made from them are too. The name is hashed as given;
 * buildInventory passes the canonical form (see canonicalUuid).
 */
export function nodeIdFor(gpuUuid: string): string {
  return uuidV5(gpuUuid, NODE_ID_NAMESPACE);
}

/** "gpu-5F1C…" → "GPU-5f1c…", so a hand-typed gpu_uuid matches what nvidia-smi prints. */
function canonicalUuid(uuid: string): string {
  const u = uuid.trim();
  return GPU_UUID.test(u) ? `GPU-${u.slice(4).toLowerCase()}` : u;
}

// ---- inventory --------------------------------------------------------------------------------

export interface InventoryDefaults {
  price_per_hour?: number;
  country?: string;
  country_code?: string;
  launcher?: string;
}

/**
 * Declared nodes first, in config order, then GPUs nvidia-smi found that the config does not name.
 *
 * - A declared node is the config's word: every field of RentalNode in the config schema is required,
 *   so its values win even where nvidia-smi says otherwise. Its gpu_uuid need not be seen on this host
 *   (discovery may have failed, or the launcher may reach another machine); `doctor` compares.
 * - A declared node without gpu_uuid gets its id from `config:<gpu>:<country_code>:<n>`, n counting
 *   the earlier declarations with the same gpu and country_code. Adding, removing or reordering other
 *   nodes keeps its id; only reordering look-alike declarations swaps theirs.
 * - An undeclared GPU is listed with what nvidia-smi says and the defaults. It is priced (rentable)
 *   only when the defaults give a price, a country, a country code and a launcher, and its
 *   compute_cap is known: a public entry must be complete and true.
 */
export function buildInventory(opts: {
  declared: RentalNodeConfig[];
  discovered: DiscoveredGpu[];
  defaults: InventoryDefaults;
}): RentalNode[] {
  const discovered = new Map(opts.discovered.map((g) => [canonicalUuid(g.uuid), g]));
  const declaredAt = new Map<string, number>();
  const lookalikes = new Map<string, number>();
  const nodes: RentalNode[] = [];

  opts.declared.forEach((d, i) => {
    let idName: string;
    let gpuUuids: string[] = [];
    if (d.gpu_uuid !== undefined) {
      const uuid = canonicalUuid(d.gpu_uuid);
      const earlier = declaredAt.get(uuid);
      if (earlier !== undefined) {
        throw new ConfigError(`rental_nodes[${i}].gpu_uuid: "${d.gpu_uuid}" is also declared by rental_nodes[${earlier}]`);
      }
      declaredAt.set(uuid, i);
      idName = uuid;
      gpuUuids = [uuid];
    } else {
      const key = `${d.gpu}:${d.country_code}`;
      const n = lookalikes.get(key) ?? 0;
      lookalikes.set(key, n + 1);
      idName = `config:${key}:${n}`;
    }
    nodes.push({
      node_id: nodeIdFor(idName),
      gpu: d.gpu,
      gpu_uuids: gpuUuids,
      vram_mb: d.vram_mb,
      compute_cap: d.compute_cap,
      country: d.country,
      country_code: d.country_code,
      price_per_hour: d.price_per_hour,
      launcher: d.launcher,
    });
  });

  const { price_per_hour, country, country_code, launcher } = opts.defaults;
  for (const [uuid, g] of discovered) {
    if (declaredAt.has(uuid)) continue;
    const complete = price_per_hour !== undefined && !!country && !!country_code && !!launcher && g.compute_cap > 0;
    nodes.push({
      node_id: nodeIdFor(uuid),
      gpu: g.name,
      gpu_uuids: [uuid],
      vram_mb: g.vram_mb,
      compute_cap: g.compute_cap,
      country: country ?? "",
      country_code: country_code ?? "",
      price_per_hour: complete ? price_per_hour : null,
      launcher: launcher ?? "",
    });
  }
  return nodes;
}

/** Priced, and naming the GPU(s) a launcher hands out (without them it could only hand out none, or all). */
export function isRentable(node: RentalNode): node is RentableNode {
  return node.price_per_hour !== null && node.gpu_uuids.length > 0;
}

/** Why a node is not rentable (for `doctor`), or null when it is. */
export function whyNotRentable(node: RentalNode): string | null {
  if (isRentable(node)) return null;
  if (node.price_per_hour !== null) return "no gpu_uuid: set the GPU's UUID (nvidia-smi -L) in its rental_nodes entry";
  const lacking = [
    !node.country && "country",
    !node.country_code && "country_code",
    !node.launcher && "launcher",
    node.compute_cap <= 0 && "compute_cap",
  ].filter((f): f is string => !!f);
  // An undeclared GPU is priced only when nothing else is lacking, so name what is.
  const what = lacking.length ? lacking.join(", ") : "price_per_hour";
  return `no ${what}: declare ${node.gpu_uuids[0] ?? "it"} in rental_nodes`;
}

/** The public shape of a rentable node (GET /api/v1/gpus); exact, per GpuEntry. */
export function toGpuEntry(node: RentableNode): GpuEntry {
  return {
    node_id: node.node_id,
    gpu_model: node.gpu,
    vram_mb: node.vram_mb,
    compute_cap: node.compute_cap,
    country: node.country,
    country_code: node.country_code,
    price_per_hour: node.price_per_hour,
  };
}
