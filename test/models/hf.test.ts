import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ensureChatModel } from "../../models/cache";
import { parseEntry, type HubEntry } from "../../models/catalogue";
import { chooseGguf, HfHub, hfModelId, nextLink, parseHfRef, quantOf, resolveHfGguf, resolveHubEntry, type HubFile } from "../../src/ops/pull/hf";
import { ChecksumError, CorruptFileError, PullError, pullModel } from "../../src/ops/pull/pull";
import { tempDir } from "../helpers/app";
import { CLI } from "../helpers/cli";
import { gitSha1, LocalHub, sha256 } from "../helpers/hub";
import { attackGguf, validGguf } from "./gguf-bytes";

// Pulls by name from a local server that speaks the Hugging Face hub's API (test/helpers/hub.ts):
// the revision endpoint, the paged tree with `lfs.oid` and `oid`, `resolve/` redirecting to storage
// on another origin that honours Range, and a gated repository that answers 401 without the token.

const root = tempDir("appliance-hf-");
const COMMIT = "1111111111111111111111111111111111111111";
const OLD = "2222222222222222222222222222222222222222";

let gguf: Uint8Array;
let hubServer: LocalHub;
let endpoint = "";
let TOKEN = "";
let tampered: LocalHub["tampered"];
let cutOnce: LocalHub["cutOnce"];
let storageSeen: LocalHub["storageSeen"];
let hubSeen: LocalHub["hubSeen"];
const blob = (text: string, size = 0) => new TextEncoder().encode(text + "x".repeat(size));

beforeAll(async () => {
  gguf = new Uint8Array(readFileSync(await ensureChatModel("small-chat")));
  hubServer = new LocalHub();
  ({ endpoint, token: TOKEN, tampered, cutOnce, storageSeen, hubSeen } = hubServer);
  const addRepo = hubServer.addRepo.bind(hubServer);
  const readme = blob("# tiny\n");
  addRepo("acme/Tiny-GGUF", COMMIT, {
    "README.md": { bytes: readme, lfs: false },
    "Tiny-Q4_K_M.gguf": { bytes: gguf, lfs: true },
    "Tiny-Q8_0.gguf": { bytes: blob("q8", 5000), lfs: true },
    "mmproj-Tiny-F16.gguf": { bytes: validGguf("projector f16"), lfs: true }, // pulled: its header is checked
    "mmproj-Tiny-Q8_0.gguf": { bytes: blob("projector q8", 2000), lfs: true },
    "split/Tiny-Q2_K-00002-of-00002.gguf": { bytes: blob("part two", 1000), lfs: true },
    "split/Tiny-Q2_K-00001-of-00002.gguf": { bytes: blob("part one", 1000), lfs: true },
  });
  addRepo("acme/Tiny-GGUF", OLD, { "Tiny-Q4_K_M.gguf": { bytes: blob("old q4", 4000), lfs: true } }, "v1");
  addRepo("acme/gated", COMMIT, { "Gated-Q4_K_M.gguf": { bytes: gguf, lfs: true } });
  addRepo("acme/Corrupt-GGUF", COMMIT, { "Corrupt-Q4_K_M.gguf": { bytes: attackGguf(), lfs: true } });
  addRepo("acme/config-only", COMMIT, { "config.json": { bytes: blob('{"a":1}'), lfs: false }, "model-Q4_0.gguf": { bytes: blob("q4", 100), lfs: true } });
});

afterAll(() => {
  hubServer?.stop();
  rmSync(root, { recursive: true, force: true });
});

describe("references and choices", () => {
  test("hf: references parse into repository, revision, path or quantisation", () => {
    expect(parseHfRef("hf:ggml-org/Qwen3-1.7B-GGUF:Q4_K_M")).toEqual({ repo: "ggml-org/Qwen3-1.7B-GGUF", revision: "main", quant: "Q4_K_M" });
    expect(parseHfRef("hf:org/repo@v1.0/dir/file.gguf")).toEqual({ repo: "org/repo", revision: "v1.0", path: "dir/file.gguf" });
    expect(parseHfRef(`hf:org/repo@${COMMIT}`)).toEqual({ repo: "org/repo", revision: COMMIT });
    for (const bad of ["hf:org", "hf:/repo", "hf:org/repo/../x", "hf:org/repo:", "hf:org/repo/a//b", "org/repo:Q4"]) expect(() => parseHfRef(bad)).toThrow(PullError);
  });

  test("the quantisation a GGUF's name carries", () => {
    const cases: [string, string | null][] = [
      ["Qwen3-1.7B-Q4_K_M.gguf", "Q4_K_M"],
      ["gemma-3-27b-it-q4_0.gguf", "Q4_0"],
      ["model.IQ4_XS.gguf", "IQ4_XS"],
      ["x-BF16.gguf", "BF16"],
      ["big-Q2_K-00001-of-00003.gguf", "Q2_K"],
      ["mmproj-model-f16.gguf", "F16"],
      ["model.gguf", null],
    ];
    for (const [name, q] of cases) expect([name, quantOf(name)]).toEqual([name, q]);
  });

  const f = (path: string): HubFile => ({ path, size: 1, oid: "a".repeat(40) });
  const files = ["a-Q4_K_M.gguf", "a-Q8_0.gguf", "mmproj-a-F16.gguf", "mmproj-a-BF16.gguf", "s/a-Q2_K-00002-of-00002.gguf", "s/a-Q2_K-00001-of-00002.gguf", "README.md"].map(f);
  test("by quantisation: the matching GGUF and the best projector (same quantisation, else F16, else BF16)", () => {
    const c = chooseGguf(files, { repo: "o/a", quant: "q8_0" });
    expect([c.parts.map((p) => p.path), c.quant, c.mmproj?.path]).toEqual([["a-Q8_0.gguf"], "Q8_0", "mmproj-a-F16.gguf"]);
  });
  test("a split GGUF comes whole, its parts in order; a missing part is refused", () => {
    expect(chooseGguf(files, { repo: "o/a", quant: "Q2_K" }).parts.map((p) => p.path)).toEqual(["s/a-Q2_K-00001-of-00002.gguf", "s/a-Q2_K-00002-of-00002.gguf"]);
    expect(() => chooseGguf(files.slice(0, 5), { repo: "o/a", quant: "Q2_K" })).toThrow("split in 2 parts but the repository has 1");
  });
  test("an unknown quantisation names the ones there are; several GGUFs and no quantisation asks for one", () => {
    expect(() => chooseGguf(files, { repo: "o/a", quant: "Q5_K_M" })).toThrow("no GGUF with quantisation Q5_K_M (it has: Q2_K, Q4_K_M, Q8_0)");
    expect(() => chooseGguf(files, { repo: "o/a" })).toThrow("3 GGUFs in it; choose one with :QUANT");
    expect(chooseGguf([f("only.gguf")], { repo: "o/a" }).parts[0]!.path).toBe("only.gguf");
  });
  test("model ids: the repository's name without its GGUF suffix, and the quantisation", () => {
    expect(hfModelId(parseHfRef("hf:ggml-org/Qwen3-1.7B-GGUF:Q4_K_M"), "Q4_K_M")).toBe("qwen3-1.7b-q4_k_m");
    expect(hfModelId(parseHfRef("hf:o/r/weights/My Model.gguf"), null, "weights/My Model.gguf")).toBe("my-model");
  });
  test("Link headers: the rel=next target, resolved against the page", () => {
    expect(nextLink('<https://hub/api/models/o/r/tree/x?cursor=abc>; rel="next"', "https://hub/a")).toBe("https://hub/api/models/o/r/tree/x?cursor=abc");
    expect(nextLink('</p2>; rel="prev", </p3>; rel="next"', "https://hub/api")).toBe("https://hub/p3");
    expect(nextLink(null, "https://hub")).toBeNull();
  });
});

describe("pulls against the local hub", () => {
  const hubOf = (token?: string) => new HfHub({ endpoint, token });
  let n = 0;
  const modelsDir = () => join(root, `models-${++n}`);

  test("by quantisation: the branch resolved to its commit, every file checked, the projector along; the token never reaches storage", async () => {
    const h = hubOf(TOKEN);
    const { entry, commit } = await resolveHfGguf(parseHfRef("hf:acme/Tiny-GGUF:Q4_K_M"), h, { maxContext: 4096 });
    expect(commit).toBe(COMMIT);
    expect(entry.files.model).toEqual({ url: `${endpoint}/acme/Tiny-GGUF/resolve/${COMMIT}/Tiny-Q4_K_M.gguf`, path: "Tiny-Q4_K_M.gguf", bytes: gguf.length, sha256: sha256(gguf) });
    expect(entry.files.mmproj!.path).toBe("mmproj-Tiny-F16.gguf");
    expect(entry.vision).toBe(true);
    storageSeen.length = 0;
    const dir = modelsDir();
    const r = await pullModel(entry, { modelsDir: dir, fetch: h.fetch });
    expect(r.files.map((x) => x.status)).toEqual(["downloaded", "downloaded"]);
    expect(readFileSync(join(dir, entry.id, "Tiny-Q4_K_M.gguf"))).toEqual(Buffer.from(gguf));
    expect(storageSeen.length).toBe(2);
    expect(storageSeen.every((s) => s.auth === null)).toBe(true);
    expect(hubSeen.filter((s) => s.path.includes("/resolve/")).every((s) => s.auth === `Bearer ${TOKEN}`)).toBe(true);
  });

  test("by revision: a tag names an older commit, and its files", async () => {
    const { entry, commit } = await resolveHfGguf(parseHfRef("hf:acme/Tiny-GGUF@v1:Q4_K_M"), hubOf(), { maxContext: 4096 });
    expect(commit).toBe(OLD);
    expect(entry.revision).toBe(OLD);
    expect(entry.files.model!.url).toContain(`/resolve/${OLD}/`);
    expect(entry.files.model!.bytes).toBe(4006);
    expect(entry.files.mmproj).toBeUndefined();
    const missing = await resolveHfGguf(parseHfRef("hf:acme/Tiny-GGUF@nope:Q4_K_M"), hubOf(), { maxContext: 4096 }).catch((e) => e);
    expect((missing as Error).message).toBe("hf:acme/Tiny-GGUF@nope: not found on " + endpoint + " (HTTP 404)");
  });

  test("a corrupted LFS file is refused by SHA-256, a corrupted small file by its git blob SHA-1; nothing lands", async () => {
    const h = hubOf();
    const { entry } = await resolveHfGguf(parseHfRef("hf:acme/Tiny-GGUF:Q8_0"), h, { maxContext: 4096 });
    const q8 = entry.files.model!;
    const bad = blob("q8", 5000);
    bad[10] = 0x41;
    tampered.set(q8.sha256!, bad);
    const dir = modelsDir();
    const e1 = await pullModel(entry, { modelsDir: dir, fetch: h.fetch }).catch((e) => e);
    tampered.clear();
    expect(e1).toBeInstanceOf(ChecksumError);
    expect((e1 as Error).message).toContain("expected sha256");
    expect(existsSync(join(dir, entry.id, q8.path))).toBe(false);

    // a small file: checked by the hub's git blob SHA-1
    const readme = blob("# tiny\n");
    const file = { url: h.fileUrl("acme/Tiny-GGUF", COMMIT, "README.md"), path: "README.md", bytes: readme.length, sha256: null, git_sha1: gitSha1(readme) };
    const small = { ...entry, id: "readme", files: { readme: file } };
    const ok = await pullModel(small, { modelsDir: dir, fetch: h.fetch });
    expect(ok.files[0]!.status).toBe("downloaded");
    const wrong = { ...small, id: "readme-wrong", files: { readme: { ...file, git_sha1: gitSha1(blob("# tinY\n")) } } };
    const e2 = await pullModel(wrong, { modelsDir: dir, fetch: h.fetch }).catch((e) => e);
    expect(e2).toBeInstanceOf(ChecksumError);
    expect((e2 as Error).message).toContain("expected git blob sha1");
    expect(existsSync(join(dir, "readme-wrong", "README.md"))).toBe(false);
  });

  test("a download cut mid-file resumes with a Range request through the redirect", async () => {
    const h = hubOf();
    const { entry } = await resolveHfGguf(parseHfRef("hf:acme/Tiny-GGUF:Q4_K_M"), h, { maxContext: 4096 });
    const cut = Math.floor(gguf.length / 3);
    cutOnce.set(entry.files.model!.sha256!, cut);
    storageSeen.length = 0;
    const dir = modelsDir();
    const r = await pullModel({ ...entry, files: { model: entry.files.model! } }, { modelsDir: dir, fetch: h.fetch, retryDelayMs: 10 });
    expect(r.files[0]!.status).toBe("downloaded");
    expect(storageSeen.map((s) => s.range)).toEqual([null, `bytes=${cut}-`]);
    expect(sha256(readFileSync(join(dir, entry.id, "Tiny-Q4_K_M.gguf")))).toBe(sha256(gguf));
  });

  test("a gated repository without a token says what to do; with the token it pulls", async () => {
    const e = await resolveHfGguf(parseHfRef("hf:acme/gated:Q4_K_M"), hubOf(), { maxContext: 4096 }).catch((x) => x);
    expect(e).toBeInstanceOf(PullError);
    expect((e as Error).message).toBe(`acme/gated: the repository is gated or private (HTTP 401): accept its conditions at ${endpoint}/acme/gated, create an access token (${endpoint}/settings/tokens) and set HF_TOKEN to it`);
    const wrong = await resolveHfGguf(parseHfRef("hf:acme/gated:Q4_K_M"), hubOf("hf_other"), { maxContext: 4096 }).catch((x) => x);
    expect((wrong as Error).message).toStartWith("acme/gated: HF_TOKEN's account may not read it (HTTP 401)");
    const { entry } = await resolveHfGguf(parseHfRef("hf:acme/gated:Q4_K_M"), hubOf(TOKEN), { maxContext: 4096 });
    const r = await pullModel(entry, { modelsDir: modelsDir(), fetch: hubOf(TOKEN).fetch });
    expect(r.files[0]!.status).toBe("downloaded");
  });

  test("`appliance models pull hf:…` with HF_ENDPOINT and HF_TOKEN: files in place, the [[models]] block with the GGUF's trained context", async () => {
    const dir = join(root, "cli");
    const child = Bun.spawn([process.execPath, CLI, "models", "pull", "hf:acme/gated:Q4_K_M", "--json", "--models-dir", join(dir, "models")], {
      env: { PATH: process.env.PATH ?? "", HOME: dir, XDG_CONFIG_HOME: join(dir, "no-config"), APPLIANCE_DATA_DIR: dir, HF_ENDPOINT: endpoint, HF_TOKEN: TOKEN },
      stdout: "pipe",
      stderr: "pipe",
    });
    const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
    expect(stderr).toContain(`commit ${COMMIT}`);
    expect(code).toBe(0);
    const out = JSON.parse(stdout);
    expect(out.commit).toBe(COMMIT);
    expect(out.manifest).toMatchObject({ id: "gated-q4_k_m", kind: "chat", files: { model: "gated-q4_k_m/Gated-Q4_K_M.gguf" } });
    // the small-chat preset's trained context (read from the file), under the 16k default window
    const { trainedContext } = await import("../../src/ops/pull/hf");
    expect(out.manifest.max_context).toBe(Math.min((await trainedContext(await ensureChatModel("small-chat")))!, 16384));
    expect(existsSync(join(dir, "models", "gated-q4_k_m", "Gated-Q4_K_M.gguf"))).toBe(true);
  });
});

describe("catalogue entries that name a repository and commit", () => {
  const entryText = (files: Record<string, string>) =>
    JSON.stringify({ id: "tiny-hub", name: "Tiny from the hub", kind: "chat", description: "test", max_context: 2048, source: "hf", hf: { repo: "acme/Tiny-GGUF", revision: COMMIT, files } });

  test("the entry is validated; a pull checks every file against the hub's records for that commit", async () => {
    expect(() => parseEntry(entryText({ model: "../x.gguf" }))).toThrow('must stay inside the model\'s folder');
    expect(() => parseEntry(entryText({ model: "a.gguf" }).replace(COMMIT, "main"))).toThrow("hf.revision: Expected string to match");
    const e = parseEntry(entryText({ model: "Tiny-Q4_K_M.gguf", readme: "README.md" })) as HubEntry;
    const h = new HfHub({ endpoint });
    const d = await resolveHubEntry(e, h);
    expect(d.revision).toBe(COMMIT);
    expect(d.files.model).toMatchObject({ path: "Tiny-Q4_K_M.gguf", bytes: gguf.length, sha256: sha256(gguf) });
    expect(d.files.readme).toMatchObject({ path: "README.md", sha256: null, git_sha1: gitSha1(blob("# tiny\n")) });
    const dir = join(root, "hub-entry");
    // a README that is not the recorded one is refused by its git blob SHA-1
    tampered.set(sha256(blob("# tiny\n")), blob("# tinY\n"));
    const bad = await pullModel(d, { modelsDir: dir, fetch: h.fetch }).catch((x) => x);
    tampered.clear();
    expect(bad).toBeInstanceOf(ChecksumError);
    expect(existsSync(join(dir, "tiny-hub", "README.md"))).toBe(false);
    const ok = await pullModel(d, { modelsDir: dir, fetch: h.fetch });
    expect(ok.files.map((f) => f.status)).toEqual(["present", "downloaded"]); // the model came in on the first try
    const missing = await resolveHubEntry(parseEntry(entryText({ model: "nope.gguf" })) as HubEntry, h).catch((x) => x);
    expect((missing as Error).message).toBe(`tiny-hub: hf:acme/Tiny-GGUF@${COMMIT} has no file nope.gguf`);
  });

  test("`models pull` and `models list` take such an entry from a catalogue folder", async () => {
    const dir = join(root, "cli-hub");
    mkdirSync(join(dir, "catalogue"), { recursive: true });
    writeFileSync(join(dir, "catalogue", "tiny-hub.json"), entryText({ model: "Tiny-Q4_K_M.gguf" }));
    const run = async (args: string[]) => {
      const child = Bun.spawn([process.execPath, CLI, "models", ...args, "--catalogue", join(dir, "catalogue"), "--models-dir", join(dir, "models")], {
        env: { PATH: process.env.PATH ?? "", HOME: dir, XDG_CONFIG_HOME: join(dir, "no-config"), APPLIANCE_DATA_DIR: dir, HF_ENDPOINT: endpoint },
        stdout: "pipe",
        stderr: "pipe",
      });
      const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
      return { stdout, stderr, code };
    };
    expect(JSON.parse((await run(["list", "--json"])).stdout)[0]).toMatchObject({ id: "tiny-hub", status: "missing", verified: true });
    const pulled = await run(["pull", "tiny-hub", "--json"]);
    expect(pulled.code).toBe(0);
    expect(JSON.parse(pulled.stdout).manifest).toMatchObject({ id: "tiny-hub", files: { model: "tiny-hub/Tiny-Q4_K_M.gguf" } });
    expect(JSON.parse((await run(["list", "--json"])).stdout)[0]).toMatchObject({ id: "tiny-hub", status: "present" });
  });
});

describe("a corrupt GGUF on the hub (issue 41 M2)", () => {
  test("is refused before it is moved into place, checksum or not: nothing is left, not even the .part", async () => {
    const h = new HfHub({ endpoint });
    const { entry } = await resolveHfGguf(parseHfRef("hf:acme/Corrupt-GGUF:Q4_K_M"), h, { maxContext: 4096 });
    expect(entry.files.model!.sha256).toBe(sha256(attackGguf())); // the hub vouches for these very bytes
    const dir = join(root, "corrupt");
    const err = await pullModel(entry, { modelsDir: dir, fetch: h.fetch }).catch((x) => x);
    expect(err).toBeInstanceOf(CorruptFileError);
    expect(err).toBeInstanceOf(PullError);
    expect(err.message).toBe(
      "Corrupt-Q4_K_M.gguf: not a valid GGUF file (too_many_kvs): kv_count at byte 16: 9223372036854775808 key-value pairs: the 0 bytes after the header hold at most 0 (14 bytes each at least; limit 65536); the download was deleted",
    );
    const folder = join(dir, entry.id);
    expect(existsSync(join(folder, "Corrupt-Q4_K_M.gguf"))).toBe(false);
    expect(existsSync(join(folder, "Corrupt-Q4_K_M.gguf.part"))).toBe(false);
  });

  test("a corrupt file an earlier pull left in place is removed and fetched again, then refused", async () => {
    const h = new HfHub({ endpoint });
    const { entry } = await resolveHfGguf(parseHfRef("hf:acme/Corrupt-GGUF:Q4_K_M"), h, { maxContext: 4096 });
    const dir = join(root, "corrupt-present");
    mkdirSync(join(dir, entry.id), { recursive: true });
    writeFileSync(join(dir, entry.id, "Corrupt-Q4_K_M.gguf"), attackGguf()); // the right size: once taken as present
    expect(await pullModel(entry, { modelsDir: dir, fetch: h.fetch }).catch((x) => x)).toBeInstanceOf(CorruptFileError);
    expect(existsSync(join(dir, entry.id, "Corrupt-Q4_K_M.gguf"))).toBe(false);
  });

  test("`models pull hf:…` prints one error line naming the problem and exits 1", async () => {
    const dir = join(root, "cli-corrupt");
    mkdirSync(dir, { recursive: true });
    const child = Bun.spawn([process.execPath, CLI, "models", "pull", "hf:acme/Corrupt-GGUF:Q4_K_M", "--models-dir", join(dir, "models")], {
      env: { PATH: process.env.PATH ?? "", HOME: dir, XDG_CONFIG_HOME: join(dir, "no-config"), APPLIANCE_DATA_DIR: dir, HF_ENDPOINT: endpoint },
      stdout: "pipe",
      stderr: "pipe",
    });
    const [stderr, code] = await Promise.all([new Response(child.stderr).text(), child.exited]);
    expect(code).toBe(1);
    expect(stderr).toContain("error: Corrupt-Q4_K_M.gguf: not a valid GGUF file (too_many_kvs): kv_count at byte 16");
    expect(stderr).not.toContain("    at ");
    expect(existsSync(join(dir, "models", "corrupt-q4_k_m", "Corrupt-Q4_K_M.gguf"))).toBe(false);
  }, 30_000);
});
