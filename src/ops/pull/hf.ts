import type { CatalogueFile, DownloadEntry, HubEntry } from "../../../models/catalogue";
import { checkGguf } from "../../3-engines/gguf-check";
import { PullError } from "./pull";

// Pulls from a Hugging Face hub by name, as `ollama pull hf.co/org/repo:Q4_K_M` and
// `llama-server -hf org/repo:Q4_K_M` do:
//   hf:OWNER/REPO[@REVISION]/PATH    one file, or every file under a folder
//   hf:OWNER/REPO[@REVISION]:QUANT   the GGUF whose name carries that quantisation (all parts of a
//                                    split GGUF); a vision repo's mmproj comes along
//   hf:OWNER/REPO[@REVISION]         the repository's only GGUF
// The revision (default "main") is resolved to its commit first, and everything after that names
// the commit, so a branch that moves during a pull cannot mix two versions. Every file is checked
// against what the hub records for that commit: the SHA-256 of a file kept in LFS (`lfs.oid`), the
// git blob SHA-1 of a small one (`oid`), and the size. HF_ENDPOINT (a mirror) and HF_TOKEN (gated
// or private repositories) are honoured; the token is sent to the hub's own origin only, never to
// the storage host a download is redirected to.

export interface HfRef {
  repo: string;
  /** As written; "main" when not given. */
  revision: string;
  path?: string;
  quant?: string;
}

const NAME = "[A-Za-z0-9][A-Za-z0-9._-]*";
const REF = new RegExp(`^hf:(${NAME}/${NAME})(?:@([A-Za-z0-9][A-Za-z0-9._-]*))?(?:/(.+)|:([A-Za-z0-9][A-Za-z0-9._-]*))?$`);

export function isHfRef(s: string): boolean {
  return s.startsWith("hf:");
}

export function parseHfRef(ref: string): HfRef {
  const m = REF.exec(ref.trim());
  if (!m) throw new PullError(`"${ref}" is not a Hugging Face reference: use hf:OWNER/REPO[@REVISION]/PATH or hf:OWNER/REPO[@REVISION]:QUANT (e.g. hf:ggml-org/Qwen3-1.7B-GGUF:Q4_K_M)`);
  const path = m[3]?.replace(/\/+$/, "");
  if (path !== undefined && (path === "" || path.split("/").some((p) => p === "" || p === "." || p === ".."))) throw new PullError(`"${ref}": the path must name a file or folder inside the repository`);
  return { repo: m[1]!, revision: m[2] ?? "main", ...(path !== undefined ? { path } : {}), ...(m[4] !== undefined ? { quant: m[4] } : {}) };
}

/** A file as the hub's tree lists it. */
export interface HubFile {
  path: string;
  size: number;
  /** The git blob SHA-1 (of the LFS pointer, for a file in LFS). */
  oid: string;
  lfs?: { oid: string; size: number };
}

export interface HubOptions {
  /** Default HF_ENDPOINT, else https://huggingface.co. */
  endpoint?: string;
  /** Default HF_TOKEN. */
  token?: string;
  fetch?: (url: string, init: RequestInit) => Promise<Response>;
}

export class HfHub {
  readonly endpoint: string;
  private readonly token: string | undefined;
  private readonly origin: string;
  private readonly doFetch: (url: string, init: RequestInit) => Promise<Response>;

  constructor(o: HubOptions = {}) {
    this.endpoint = (o.endpoint ?? (process.env.HF_ENDPOINT || "https://huggingface.co")).replace(/\/+$/, "");
    this.origin = new URL(this.endpoint).origin;
    this.token = o.token ?? (process.env.HF_TOKEN || undefined);
    this.doFetch = o.fetch ?? ((url, init) => fetch(url, init));
  }

  /**
   * A request that follows redirects itself (up to 10): the token goes to the hub's origin only,
   * every other header (Range) to each hop. The hub's 401/403 become a PullError saying what to do.
   */
  readonly fetch = async (url: string, init: RequestInit = {}): Promise<Response> => {
    let at = url;
    for (let hop = 0; hop <= 10; hop++) {
      const headers = new Headers(init.headers);
      if (this.token && new URL(at).origin === this.origin) headers.set("authorization", `Bearer ${this.token}`);
      else headers.delete("authorization");
      const res = await this.doFetch(at, { ...init, headers, redirect: "manual" });
      const location = res.headers.get("location");
      if (res.status >= 300 && res.status < 400 && location) {
        await res.body?.cancel();
        at = new URL(location, at).href;
        continue;
      }
      if ((res.status === 401 || res.status === 403) && new URL(at).origin === this.origin) {
        await res.body?.cancel();
        throw new PullError(this.denied(url, res.status));
      }
      return res;
    }
    throw new PullError(`${url}: more than 10 redirects`);
  };

  private denied(url: string, status: number): string {
    const repo = /\/(?:api\/models\/)?([^/]+\/[^/]+)\//.exec(new URL(url).pathname)?.[1] ?? "the repository";
    const page = `${this.endpoint}/${repo}`;
    return this.token
      ? `${repo}: HF_TOKEN's account may not read it (HTTP ${status}): if it is gated, accept its conditions at ${page} with that account; if it is private, use a token that can read it`
      : `${repo}: the repository is gated or private (HTTP ${status}): accept its conditions at ${page}, create an access token (${this.endpoint}/settings/tokens) and set HF_TOKEN to it`;
  }

  private async json(url: string, what: string): Promise<{ body: unknown; res: Response }> {
    const res = await this.fetch(url, { headers: { accept: "application/json" } });
    if (res.status === 404) {
      await res.body?.cancel();
      throw new PullError(`${what}: not found on ${this.endpoint} (HTTP 404)`);
    }
    if (!res.ok) {
      await res.body?.cancel();
      throw new PullError(`${what}: ${url}: HTTP ${res.status} ${res.statusText}`.trim());
    }
    try {
      return { body: await res.json(), res };
    } catch (e) {
      throw new PullError(`${what}: ${url}: not JSON (${(e as Error).message})`);
    }
  }

  /** The commit a revision (branch, tag or commit) names now. */
  async commit(repo: string, revision: string): Promise<string> {
    const { body } = await this.json(`${this.endpoint}/api/models/${repo}/revision/${encodeURIComponent(revision)}`, `hf:${repo}@${revision}`);
    const sha = (body as { sha?: unknown }).sha;
    if (typeof sha !== "string" || !/^[0-9a-f]{40}$/.test(sha)) throw new PullError(`hf:${repo}@${revision}: the hub did not name a commit for it`);
    return sha;
  }

  /** Every file of the repository at `commit` (the tree is paged; each page names the next). */
  async tree(repo: string, commit: string): Promise<HubFile[]> {
    const files: HubFile[] = [];
    let url: string | null = `${this.endpoint}/api/models/${repo}/tree/${commit}?recursive=true`;
    for (let page = 0; url; page++) {
      if (page > 1000) throw new PullError(`hf:${repo}: the file list does not end`);
      const { body, res } = await this.json(url, `hf:${repo}@${commit}`);
      if (!Array.isArray(body)) throw new PullError(`hf:${repo}: the hub's file list is not a list`);
      for (const item of body) {
        const f = item as { type?: unknown; path?: unknown; size?: unknown; oid?: unknown; lfs?: { oid?: unknown; size?: unknown } | null };
        if (f.type !== "file") continue;
        if (typeof f.path !== "string" || typeof f.size !== "number" || typeof f.oid !== "string") throw new PullError(`hf:${repo}: a file entry without path, size or oid`);
        const lfs = f.lfs && typeof f.lfs.oid === "string" && typeof f.lfs.size === "number" ? { oid: f.lfs.oid, size: f.lfs.size } : undefined;
        files.push({ path: f.path, size: f.size, oid: f.oid, ...(lfs ? { lfs } : {}) });
      }
      url = nextLink(res.headers.get("link"), url);
    }
    return files;
  }

  fileUrl(repo: string, commit: string, path: string): string {
    return `${this.endpoint}/${repo}/resolve/${commit}/${path.split("/").map(encodeURIComponent).join("/")}`;
  }
}

/** RFC 8288: the target of rel="next", resolved against the page's URL. */
export function nextLink(header: string | null, base: string): string | null {
  for (const part of (header ?? "").split(/,(?=\s*<)/)) {
    const m = /^\s*<([^>]*)>\s*;(.*)$/.exec(part);
    if (m && /(?:^|;)\s*rel\s*=\s*"?(?:[^";]*\s)?next(?:\s[^";]*)?"?\s*(?:;|$)/i.test(m[2]!)) return new URL(m[1]!, base).href;
  }
  return null;
}

/** A catalogue file for one hub file: checked by its LFS SHA-256, else by its git blob SHA-1. */
export function hubFile(hub: HfHub, repo: string, commit: string, f: HubFile, path = f.path): CatalogueFile {
  if (f.lfs) {
    if (!/^[0-9a-f]{64}$/.test(f.lfs.oid)) throw new PullError(`hf:${repo}: ${f.path}: the hub records no SHA-256 for it`);
    return { url: hub.fileUrl(repo, commit, f.path), path, bytes: f.lfs.size, sha256: f.lfs.oid };
  }
  if (!/^[0-9a-f]{40}$/.test(f.oid)) throw new PullError(`hf:${repo}: ${f.path}: the hub records no git hash for it`);
  return { url: hub.fileUrl(repo, commit, f.path), path, bytes: f.size, sha256: null, git_sha1: f.oid };
}

const SPLIT = /-(\d{5})-of-(\d{5})\.gguf$/i;
const isGguf = (p: string) => p.toLowerCase().endsWith(".gguf");
const isProjector = (p: string) => /mmproj/i.test(base(p));
const base = (p: string) => p.slice(p.lastIndexOf("/") + 1);

/** The quantisation a GGUF's name carries (Q4_K_M, IQ4_XS, F16, BF16, Q8_0, …), if any. */
export function quantOf(path: string): string | null {
  const name = base(path).replace(SPLIT, ".gguf").replace(/\.gguf$/i, "");
  const m = /(?:^|[-_.])((?:I?Q\d(?:_[A-Z0-9]+)*)|BF16|F16|F32|FP16|FP32|MXFP4(?:_MOE)?)$/i.exec(name);
  return m ? m[1]!.toUpperCase() : null;
}

export interface GgufChoice {
  /** The model file, all parts of a split one in order (the first is what llama.cpp opens). */
  parts: HubFile[];
  quant: string | null;
  mmproj: HubFile | null;
}

/** The GGUF a reference asks for among a repository's files, with its projector when there is one. */
export function chooseGguf(files: HubFile[], ref: Pick<HfRef, "repo" | "quant" | "path">): GgufChoice {
  const models = files.filter((f) => isGguf(f.path) && !isProjector(f.path));
  const projectors = files.filter((f) => isGguf(f.path) && isProjector(f.path));
  // group the parts of split GGUFs under their first part's name
  const groups = new Map<string, HubFile[]>();
  for (const f of models) {
    const key = f.path.replace(SPLIT, ".gguf");
    groups.set(key, [...(groups.get(key) ?? []), f]);
  }
  const quants = [...new Set([...groups.keys()].map((k) => quantOf(k) ?? base(k)))].sort();
  let key: string;
  if (ref.path !== undefined) {
    key = ref.path.replace(SPLIT, ".gguf");
    if (!groups.has(key)) throw new PullError(`hf:${ref.repo}: no GGUF "${ref.path}" in it (GGUF files: ${[...groups.keys()].join(", ") || "none"})`);
  } else if (ref.quant !== undefined) {
    const want = ref.quant.toUpperCase();
    const hits = [...groups.keys()].filter((k) => quantOf(k) === want);
    if (!hits.length) throw new PullError(`hf:${ref.repo}: no GGUF with quantisation ${ref.quant} (it has: ${quants.join(", ") || "no GGUF"})`);
    if (hits.length > 1) throw new PullError(`hf:${ref.repo}: ${hits.length} GGUFs carry ${ref.quant} (${hits.join(", ")}): name one with hf:${ref.repo}/PATH`);
    key = hits[0]!;
  } else {
    if (groups.size !== 1) throw new PullError(`hf:${ref.repo}: ${groups.size ? `${groups.size} GGUFs in it; choose one with :QUANT (${quants.join(", ")})` : "no GGUF in it: name a file or folder with hf:OWNER/REPO/PATH"}`);
    key = [...groups.keys()][0]!;
  }
  const parts = groups.get(key)!.sort((a, b) => a.path.localeCompare(b.path));
  const split = SPLIT.exec(parts[0]!.path);
  if (split && parts.length !== Number(split[2])) throw new PullError(`hf:${ref.repo}: ${key} is split in ${Number(split[2])} parts but the repository has ${parts.length}`);
  const quant = quantOf(key);
  // a projector of the same quantisation if there is one, else the F16 one, else BF16, else any
  const rank = (p: HubFile) => (quant && quantOf(p.path) === quant ? 0 : quantOf(p.path) === "F16" ? 1 : quantOf(p.path) === "BF16" ? 2 : 3);
  const mmproj = [...projectors].sort((a, b) => rank(a) - rank(b) || a.path.localeCompare(b.path))[0] ?? null;
  return { parts, quant, mmproj };
}

/** A model id from the reference: the repository's name with its GGUF suffix dropped, and the quantisation. */
export function hfModelId(ref: HfRef, quant: string | null, path?: string): string {
  const repoName = ref.repo.slice(ref.repo.indexOf("/") + 1).replace(/[-_.]?gguf$/i, "");
  const stem = path !== undefined && quant === null ? base(path).replace(/\.gguf$/i, "") : repoName;
  const id = `${stem}${quant ? `-${quant}` : ""}`.toLowerCase().replace(/[^a-z0-9._-]+/g, "-").replace(/^[^a-z0-9]+/, "");
  return id.slice(0, 128) || "hf-model";
}

export interface HfPull {
  entry: DownloadEntry;
  commit: string;
}

/**
 * The download a GGUF reference means, pinned to the commit its revision names now and checked
 * against the hub's records: a chat model (with its projector for a vision repo).
 */
export async function resolveHfGguf(ref: HfRef, hub: HfHub, o: { maxContext: number }): Promise<HfPull> {
  const commit = await hub.commit(ref.repo, ref.revision);
  const files = await hub.tree(ref.repo, commit);
  if (ref.path !== undefined && !isGguf(ref.path)) {
    throw new PullError(`hf:${ref.repo}/${ref.path}: only GGUF chat models are pulled by path; ONNX models come from catalogue entries that name their repository and revision`);
  }
  const choice = chooseGguf(files, ref);
  const entryFiles: Record<string, CatalogueFile> = {};
  choice.parts.forEach((f, i) => (entryFiles[i === 0 ? "model" : `part${i + 1}`] = hubFile(hub, ref.repo, commit, f, base(f.path))));
  if (choice.mmproj) entryFiles.mmproj = hubFile(hub, ref.repo, commit, choice.mmproj, base(choice.mmproj.path));
  const id = hfModelId(ref, choice.quant, choice.parts[0]!.path);
  const entry: DownloadEntry = {
    id,
    name: `${ref.repo}${choice.quant ? ` (${choice.quant})` : `/${base(choice.parts[0]!.path)}`}`,
    kind: "chat",
    description: `hf:${ref.repo}@${commit}`,
    repository: `${hub.endpoint}/${ref.repo}`,
    revision: commit,
    max_context: o.maxContext,
    ...(choice.mmproj ? { vision: true } : {}),
    files: entryFiles,
    manifest: { files: { model: entryFiles.model!.path, ...(choice.mmproj ? { mmproj: entryFiles.mmproj!.path } : {}) } },
  };
  return { entry, commit };
}

/** The window a pulled GGUF is served with unless the config says otherwise (as the catalogue's small chat model). */
export const HF_DEFAULT_CONTEXT = 16_384;

/** The context a GGUF was trained for (`<arch>.context_length`), read from its header; null when it does not say. */
export async function trainedContext(path: string): Promise<number | null> {
  const { readGgufFileInfo } = await import("node-llama-cpp"); // only here: the CLI starts without it
  await checkGguf(path); // node-llama-cpp's reader loops on a corrupt file's counts
  const info = await readGgufFileInfo(path, { readTensorInfo: false });
  const arch = info.metadata.general?.architecture;
  const n = arch ? (info.metadata as Record<string, Record<string, unknown> | undefined>)[arch]?.context_length : undefined;
  return typeof n === "number" && Number.isInteger(n) && n > 0 ? n : null;
}

/** A catalogue entry that names its repository and commit: the download, checked against the hub's records for that commit. */
export async function resolveHubEntry(e: HubEntry, hub: HfHub): Promise<DownloadEntry> {
  const listed = new Map((await hub.tree(e.hf.repo, e.hf.revision)).map((f) => [f.path, f]));
  const files: Record<string, CatalogueFile> = {};
  for (const [role, named] of Object.entries(e.hf.files)) {
    const { path, bytes } = typeof named === "string" ? { path: named, bytes: null } : named;
    const f = listed.get(path);
    if (!f) throw new PullError(`${e.id}: hf:${e.hf.repo}@${e.hf.revision} has no file ${path}`);
    files[role] = hubFile(hub, e.hf.repo, e.hf.revision, f);
    if (bytes !== null && files[role]!.bytes !== bytes)
      throw new PullError(`${e.id}: the hub records ${path} at ${e.hf.revision} as ${files[role]!.bytes} bytes, the catalogue as ${bytes}: refusing (not the files the catalogue names)`);
  }
  const { hf: _hf, source: _source, ...rest } = e;
  return { ...rest, source: "download", revision: e.hf.revision, repository: e.repository ?? `${hub.endpoint}/${e.hf.repo}`, files };
}
