import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ensureZImageModel } from "../../models/diffusion/z-image";
import { catalogue, hubFiles, type HubEntry } from "../../models/catalogue";
import { DiffusionPipeline } from "../../src/3-engines/diffusion/pipeline";
import { tempDir } from "../helpers/app";
import { CLI } from "../helpers/cli";
import { filesOf, LocalHub, repoFilesOf } from "../helpers/hub";

// The catalogue's `z-image-turbo` entry pulled as a user pulls it (`appliance models pull
// z-image-turbo`), from a local hub that holds the generated tiny bundle as webnn/Z-Image-Turbo at
// the pinned commit: every file checked against the hub's records, and the pulled folder is what
// the image engine loads. The real files are 6 GB; the entry's pinned sizes are checked too.

const root = tempDir("appliance-z-image-pull-");
const bundle = ensureZImageModel("z-image-tiny");
const shipped = catalogue().find((e) => e.id === "z-image-turbo") as HubEntry;
let hub: LocalHub;

beforeAll(() => {
  hub = new LocalHub();
  const files = repoFilesOf(bundle, (path) => path.startsWith("onnx/"));
  // what the real repository has beside the files the engine reads
  files["onnx/scheduler_step_model_f16.onnx"] = { bytes: new TextEncoder().encode("not pulled"), lfs: true };
  files["README.md"] = { bytes: new TextEncoder().encode("# Z-Image-Turbo\n"), lfs: false };
  hub.addRepo(shipped.hf.repo, shipped.hf.revision, files);
});
afterAll(() => {
  hub?.stop();
  rmSync(root, { recursive: true, force: true });
});

async function models(args: string[], catalogueDir: string) {
  const child = Bun.spawn([process.execPath, CLI, "models", ...args, "--catalogue", catalogueDir, "--models-dir", join(root, "models")], {
    env: { PATH: process.env.PATH ?? "", HOME: root, XDG_CONFIG_HOME: join(root, "no-config"), APPLIANCE_DATA_DIR: root, HF_ENDPOINT: hub.endpoint },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  return { stdout, stderr, code };
}

test("the shipped entry names exactly the files of the bundle layout the engine reads, with their sizes pinned", () => {
  const generated = Object.keys(filesOf(bundle)).sort();
  expect(hubFiles(shipped).map((f) => f.path).sort()).toEqual(generated);
  expect(hubFiles(shipped).every((f) => Number.isInteger(f.bytes))).toBe(true);
  expect(shipped.manifest).toMatchObject({ files: { model: "." }, device: "cuda" });
});

test("the entry with the real files' sizes is refused by a hub whose files differ, before anything is downloaded", async () => {
  const dir = join(root, "catalogue-real");
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "z-image-turbo.json"), JSON.stringify(shipped));
  const listed = JSON.parse((await models(["list", "--json"], dir)).stdout)[0];
  expect(listed).toMatchObject({ id: "z-image-turbo", kind: "image", status: "missing" });
  expect(listed.bytes).toBe(hubFiles(shipped).reduce((a, f) => a + f.bytes!, 0));
  hub.storageSeen.length = 0;
  const r = await models(["pull", "z-image-turbo"], dir);
  expect(r.code).toBe(1);
  expect(r.stderr).toContain(`z-image-turbo: the hub records tokenizer/tokenizer.json at ${shipped.hf.revision} as`);
  expect(r.stderr).toContain("the catalogue as 11422654: refusing");
  expect(hub.storageSeen.length).toBe(0);
});

test("`models pull z-image-turbo` fetches the bundle at the pinned commit, checked file by file, and the engine serves the folder", async () => {
  const dir = join(root, "catalogue-tiny");
  mkdirSync(dir, { recursive: true });
  const sizes = Object.fromEntries(Object.entries(filesOf(bundle)).map(([p, b]) => [p, b.length]));
  const tiny = structuredClone(shipped);
  for (const [role, f] of Object.entries(tiny.hf.files)) tiny.hf.files[role] = { path: typeof f === "string" ? f : f.path, bytes: sizes[typeof f === "string" ? f : f.path]! };
  writeFileSync(join(dir, "z-image-turbo.json"), JSON.stringify(tiny));

  // a corrupted transformer weight file is refused by its SHA-256
  const { sha256 } = await import("../helpers/hub");
  const data = new Uint8Array(readFileSync(join(bundle, "onnx/transformer_model_q4f16.onnx_data")));
  const bad = data.slice();
  bad[100]! ^= 0xff;
  hub.tampered.set(sha256(data), bad);
  const refused = await models(["pull", "z-image-turbo"], dir);
  hub.tampered.clear();
  expect(refused.code).toBe(1);
  expect(refused.stderr).toContain("expected sha256");

  const r = await models(["pull", "z-image-turbo", "--json"], dir);
  expect(r.stderr).toContain(`pulling z-image-turbo`);
  expect(r.code).toBe(0);
  const out = JSON.parse(r.stdout);
  expect(out.manifest).toMatchObject({ id: "z-image-turbo", kind: "image", files: { model: "z-image-turbo" }, max_context: 512, device: "cuda" });
  const pulled = join(root, "models", "z-image-turbo");
  expect(Object.keys(filesOf(pulled)).sort()).toEqual(Object.keys(filesOf(bundle)).sort());

  const req = { prompt: "a red kite over the dunes", width: 256, height: 256, seed: 11, steps: 9 };
  const [a, b] = await Promise.all([DiffusionPipeline.load(pulled, { device: "cpu", threads: 1 }), DiffusionPipeline.load(bundle, { device: "cpu", threads: 1 })]);
  try {
    expect(a.info.layout).toBe("z-image");
    expect(Buffer.from(await a.generate(req)).equals(Buffer.from(await b.generate(req)))).toBe(true);
  } finally {
    await Promise.all([a.dispose(), b.dispose()]);
  }
});
