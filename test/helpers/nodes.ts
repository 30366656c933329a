import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { tempDir } from "./app";
import { CLI, cli, serveCli } from "./cli";
import { CLUSTER_SECRET, nodeEnv as clusterEnv } from "./postgres";

// Real appliance nodes for the cluster tests (issue 45): `appliance serve` processes on one
// PostgreSQL database, each with its own data dir, port and config (its own models), all with the
// same [cluster] secret and an advertise URL naming their own port. `stopNodes` kills what was
// started (by the children's PIDs) and removes the dirs.

export { CLUSTER_SECRET };

export interface TestNode {
  /** Its listener, http://127.0.0.1:<port>. */
  url: string;
  /** Its node id (the data dir's node-id file). */
  id: string;
  dir: string;
  /** The env its CLI commands run with (the same config and store). */
  env: Record<string, string>;
  child: Subprocess;
}

const started: TestNode[] = [];
const dirs: string[] = [];

/** The env of a node's processes: its config file, the shared store, the cluster's settings. */
export function nodeEnv(config: string, storeUrl: string): Record<string, string> {
  return { APPLIANCE_CONFIG: config, ...clusterEnv(storeUrl) };
}

/** A data dir with `config` (TOML) written into it as config.toml; its path and the config's. */
export function nodeDir(config: string, prefix = "appliance-node-"): { dir: string; config: string } {
  const dir = tempDir(prefix);
  dirs.push(dir);
  const path = join(dir, "config.toml");
  writeFileSync(path, config);
  return { dir, config: path };
}

/** The CLI on `storeUrl` with `config` (a throwaway data dir); throws with its stderr when it fails. */
export function clusterCli(config: string, storeUrl: string, args: string[]) {
  const { dir, config: path } = nodeDir(config, "appliance-node-cli-");
  const r = cli(dir, args, nodeEnv(path, storeUrl));
  if (r.code !== 0) throw new Error(`appliance ${args.join(" ")} failed (${r.code}): ${r.stderr}`);
  return r;
}

/**
 * The CLI on a node's data dir and env, as a child run asynchronously: the nodes' output pipes,
 * drained by this process, keep flowing meanwhile (a synchronous spawn would stall them).
 */
export async function nodeCli(node: Pick<TestNode, "dir" | "env">, args: string[]) {
  const child = Bun.spawn([process.execPath, CLI, ...args], {
    env: { PATH: process.env.PATH ?? "", HOME: node.dir, XDG_CONFIG_HOME: join(node.dir, "no-config"), APPLIANCE_DATA_DIR: node.dir, ...node.env },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  return { code, stdout, stderr, json: <T = any>() => JSON.parse(stdout) as T };
}

/** A node serving from `dir`, which a test may kill and serve again from the same dir (the same node id). */
export interface ServedNode {
  url: string;
  id: string;
  dir: string;
  child: Subprocess;
  /** The last 20 KB of what it printed (its output is drained: a full pipe would stall it). */
  log: string;
}

/** `appliance serve` on `dir` with `env`; resolves once it listens. The caller kills it. */
export async function serveNode(dir: string, env: Record<string, string>): Promise<ServedNode> {
  const s = await serveCli(dir, ["--port", "0"], env);
  const node: ServedNode = { url: s.url, id: readFileSync(join(dir, "node-id"), "utf8").trim(), dir, child: s.child, log: "" };
  for (const stream of [s.child.stdout, s.child.stderr] as ReadableStream<Uint8Array>[])
    void (async () => {
      for await (const chunk of stream) node.log = (node.log + new TextDecoder().decode(chunk)).slice(-20_000);
    })().catch(() => {});
  return node;
}

/** One node serving with `config` (TOML) on `storeUrl`; resolves once it listens. Its output is drained. */
export async function startNode(config: string, storeUrl: string): Promise<TestNode> {
  const { dir, config: path } = nodeDir(config);
  const env = nodeEnv(path, storeUrl);
  const s = await serveNode(dir, env);
  const node = { url: s.url, id: s.id, dir, env, child: s.child };
  started.push(node);
  return node;
}

/** Kills every node started here and removes every dir made here. */
export async function stopNodes(): Promise<void> {
  const nodes = started.splice(0);
  for (const n of nodes) n.child.kill("SIGKILL");
  await Promise.all(nodes.map((n) => n.child.exited));
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
}

/** An embedding model entry (the generated ONNX files) under `id`. */
export function embedModelToml(id: string, files: string): string {
  return ["[[models]]", `id = "${id}"`, `name = "Tiny embed ${id}"`, 'kind = "embedding"', "max_context = 512", `files = { model = ${JSON.stringify(files)} }`, ""].join("\n");
}

/** A node's config: CPU, one thread, no rental discovery, then `models` (TOML). */
export function nodeConfig(models: string): string {
  return ["[engines]", 'device = "cpu"', "threads = 1", "[rentals]", "discover = false", models].join("\n");
}
