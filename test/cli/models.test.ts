import { afterAll, beforeAll, expect, test } from "bun:test";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { catalogue, isDownload, manifestFor } from "../../models/catalogue";
import { validateConfig } from "../../src/lib/config";
import { checkModelFiles } from "../../src/3-engines/registry";
import { tempDir } from "../helpers/app";
import { validGguf } from "../models/gguf-bytes";

// `appliance models list|pull` in a child process, as an operator runs it. The command is mounted
// on a root program like cli/main.ts's (same global --config/--data-dir), against a data dir with
// no user config in reach, and a catalogue whose files a local server holds.

const REPO = join(import.meta.dir, "..", "..");
const dir = tempDir("appliance-models-cli-");
const catalogueDir = join(dir, "catalogue");
const weights = randomBytes(200 * 1024);
const gguf = validGguf("unchecked"); // pulled as a .gguf: its header is checked
const tokenizer = new TextEncoder().encode('{"version":"1.0"}');
const requests: string[] = [];
let server: ReturnType<typeof Bun.serve>;

beforeAll(() => {
  server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    fetch(req) {
      const path = new URL(req.url).pathname;
      requests.push(path);
      if (path === "/weights.onnx") return new Response(weights);
      if (path === "/tokenizer.json") return new Response(tokenizer);
      if (path === "/weights.gguf") return new Response(gguf);
      return new Response("not found", { status: 404 });
    },
  });
  const url = `http://127.0.0.1:${server.port}`;
  const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");
  mkdirSync(catalogueDir);
  writeFileSync(
    join(catalogueDir, "tiny-embed.json"),
    JSON.stringify({
      id: "tiny-embed",
      name: "Tiny embedder",
      kind: "embedding",
      description: "served by the test",
      max_context: 256,
      files: {
        weights: { url: `${url}/weights.onnx`, path: "onnx/model.onnx", bytes: weights.length, sha256: sha(weights) },
        tokenizer: { url: `${url}/tokenizer.json`, path: "tokenizer.json", bytes: tokenizer.length, sha256: sha(tokenizer) },
      },
      manifest: { files: { model: "." }, slots: 2 },
    }),
  );
  writeFileSync(
    join(catalogueDir, "unchecked.json"),
    JSON.stringify({
      id: "unchecked",
      name: "No checksum",
      kind: "chat",
      description: "a file without a recorded sha256",
      max_context: 4096,
      files: { model: { url: `${url}/weights.gguf`, path: "weights.gguf", bytes: null, sha256: null } },
    }),
  );
});

afterAll(() => {
  server.stop(true);
  rmSync(dir, { recursive: true, force: true });
});

const ROOT_PROGRAM = `
import { Command } from "commander";
import { modelsCommand } from "./cli/commands/models";
await new Command("appliance")
  .option("-c, --config <file>")
  .option("-d, --data-dir <dir>")
  .addCommand(modelsCommand())
  .parseAsync(process.argv.slice(1), { from: "user" });
`;

/** Async, so the server in this process answers while the child runs. */
async function models(args: string[]) {
  const child = Bun.spawn([process.execPath, "-e", ROOT_PROGRAM, "models", ...args], {
    cwd: REPO,
    env: { PATH: process.env.PATH ?? "", HOME: dir, XDG_CONFIG_HOME: join(dir, "no-config"), APPLIANCE_DATA_DIR: dir },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  return { code, stdout, stderr };
}

test("the built-in catalogue pins every file to a revision with its size and checksum, and names each demo generator", () => {
  const entries = catalogue();
  const kinds: string[] = entries.map((e) => e.kind).sort();
  expect(kinds).toEqual(["chat", "chat", "chat", "chat", "chat", "classifier", "classifier", "embedding", "embedding", "image", "image", "image", "reranker", "reranker"]);
  for (const e of entries) {
    if (isDownload(e)) {
      expect(e.revision).toMatch(/^[0-9a-f]{40}$/);
      for (const f of Object.values(e.files)) {
        expect(f.url).toStartWith(`${e.repository}/resolve/${e.revision}/`);
        expect(f.sha256).toMatch(/^[0-9a-f]{64}$/);
        expect(f.bytes).toBeGreaterThan(0);
      }
      const config = validateConfig({ models: [manifestFor(e)] });
      expect(config.models[0]!.id).toBe(e.id);
    } else if (e.source === "generated") {
      expect(readFileSync(join(REPO, e.generator), "utf8")).toContain(`id: "${e.id}"`);
    }
  }
});

test("models list shows every built-in entry with its kind, size and where it is", async () => {
  const r = await models(["list"]);
  expect(r.code).toBe(0);
  expect(r.stdout).toContain(`models dir: ${join(dir, "models")}`);
  const lines = r.stdout.split("\n");
  for (const e of catalogue()) {
    const line = lines.find((l) => l.startsWith(e.id + " "));
    expect(line).toBeDefined();
    expect(line).toContain(e.kind);
    expect(line).toContain(isDownload(e) || e.source === "hf" ? "missing" : e.source === "generated" ? "generated (serve --demo)" : "not pullable");
  }
  expect(lines.find((l) => l.startsWith("gemma-3-27b-it "))).toContain("17.4 GB");

  const json = (await models(["list", "--json"])).stdout;
  const rows = JSON.parse(json) as { id: string; kind: string; status: string; bytes: number | null }[];
  expect(rows.map((x) => x.id).sort()).toEqual(catalogue().map((e) => e.id).sort());
  const pullable = catalogue().filter((e) => isDownload(e) || e.source === "hf");
  expect(pullable.map((e) => e.kind)).toEqual(expect.arrayContaining(["chat", "classifier", "embedding", "image"]));
  expect(rows.filter((x) => x.status === "missing").map((x) => x.id).sort()).toEqual(pullable.map((e) => e.id).sort());
});

test("models pull downloads into <data_dir>/models, verifies, and prints a [[models]] block the config accepts", async () => {
  const r = await models(["pull", "tiny-embed", "--catalogue", catalogueDir]);
  expect(r.stderr).toContain("verified");
  expect(r.code).toBe(0);
  const folder = join(dir, "models", "tiny-embed");
  expect(readFileSync(join(folder, "onnx/model.onnx")).equals(weights)).toBe(true);
  expect(readFileSync(join(folder, "tokenizer.json"), "utf8")).toBe('{"version":"1.0"}');
  expect(existsSync(join(folder, "onnx/model.onnx.part"))).toBe(false);

  expect(r.stdout).toContain(`#   models_dir = ${JSON.stringify(join(dir, "models"))}`);
  expect(r.stdout).toContain('files = { model = "tiny-embed" }');
  const config = validateConfig(Bun.TOML.parse(`models_dir = ${JSON.stringify(join(dir, "models"))}\n${r.stdout}`));
  expect(config.models).toMatchObject([{ id: "tiny-embed", kind: "embedding", max_context: 256, slots: 2, files: { model: "tiny-embed" } }]);
  expect(() => checkModelFiles(config.models, config.models_dir)).not.toThrow();

  const list = await models(["list", "--catalogue", catalogueDir]);
  expect(list.stdout.split("\n").find((l) => l.startsWith("tiny-embed "))).toMatch(new RegExp(`^tiny-embed +embedding +204\\.8 KB +present +no +${folder}$`));
  expect(list.stdout.split("\n").find((l) => l.startsWith("unchecked "))).toMatch(/^unchecked +chat +\? +missing, unverified +no +-$/);

  const before = requests.length;
  const again = await models(["pull", "tiny-embed", "--catalogue", catalogueDir, "--json"]);
  expect(again.code).toBe(0);
  expect(JSON.parse(again.stdout).files.map((f: { status: string }) => f.status)).toEqual(["present", "present"]);
  expect(requests.length).toBe(before);
});

test("models pull refuses a file with no checksum unless --allow-unverified", async () => {
  const before = requests.length;
  const refused = await models(["pull", "unchecked", "--catalogue", catalogueDir]);
  expect(refused.code).toBe(1);
  expect(refused.stderr).toContain("error: no checksum recorded for weights.gguf; refusing to download unverified weights");
  expect(refused.stderr).not.toContain("    at ");
  expect(requests.length).toBe(before);
  expect(existsSync(join(dir, "models", "unchecked", "weights.gguf"))).toBe(false);

  const models_dir = join(dir, "elsewhere");
  const taken = await models(["pull", "unchecked", "--catalogue", catalogueDir, "--allow-unverified", "--models-dir", models_dir]);
  expect(taken.code).toBe(0);
  expect(readFileSync(join(models_dir, "unchecked", "weights.gguf")).equals(gguf)).toBe(true);
  expect(taken.stdout).toContain('files = { model = "unchecked/weights.gguf" }');
});

test("models pull names the known ids for an unknown one and explains entries it cannot pull", async () => {
  const unknown = await models(["pull", "nope"]);
  expect(unknown.code).toBe(1);
  expect(unknown.stderr).toContain('error: no model "nope" in the catalogue (known: ');
  expect(unknown.stderr).toContain("gemma-3-27b-it");

  const demo = await models(["pull", "demo-chat"]);
  expect(demo.code).toBe(1);
  expect(demo.stderr).toContain("appliance serve --demo");

  writeFileSync(
    join(catalogueDir, "by-hand.json"),
    JSON.stringify({ id: "by-hand", name: "By hand", kind: "image", description: "no verifiable download", max_context: 77, source: "manual", instructions: "export it yourself" }),
  );
  const manual = await models(["pull", "by-hand", "--catalogue", catalogueDir]);
  expect(manual.code).toBe(1);
  expect(manual.stderr).toContain('"by-hand" has no verifiable download: export it yourself');
});
