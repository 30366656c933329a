import { createHash } from "node:crypto";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";

// A local server that speaks the Hugging Face hub's API, for pulls by name: the revision endpoint
// (a branch resolved to its commit), the paged recursive tree with `lfs.oid` (SHA-256) for LFS files
// and `oid` (git blob SHA-1) for small ones, and `resolve/` answering with a redirect to a storage
// server on another origin that honours Range. A repository whose name ends in "/gated" answers 401
// without the token. Tests can tamper with a blob or cut its next download short.

export const sha256 = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");
export const gitSha1 = (b: Uint8Array) => createHash("sha1").update(`blob ${b.length}\0`).update(b).digest("hex");

export interface RepoFile {
  bytes: Uint8Array;
  lfs: boolean;
}

/** Every file of a folder, by path relative to it. */
export function filesOf(dir: string): Record<string, Uint8Array> {
  const out: Record<string, Uint8Array> = {};
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else out[relative(dir, p)] = new Uint8Array(readFileSync(p));
    }
  };
  walk(dir);
  return out;
}

/** Every file of a folder as a repository's files for `addRepo`; `lfs(path)` says which the hub keeps in LFS. */
export function repoFilesOf(dir: string, lfs: (path: string) => boolean): Record<string, RepoFile> {
  return Object.fromEntries(Object.entries(filesOf(dir)).map(([path, bytes]) => [path, { bytes, lfs: lfs(path) }]));
}

/** `body` handed on slowly, `chunk` bytes every `ms` milliseconds, so a download's progress can be watched; an abort of `signal` ends it with an error. */
export function trickle(body: ReadableStream<Uint8Array>, o: { chunk: number; ms: number; signal?: AbortSignal | null }): ReadableStream<Uint8Array> {
  const reader = body.getReader();
  let pending: Uint8Array = new Uint8Array(0);
  return new ReadableStream({
    async pull(c) {
      if (!pending.length) {
        const { value, done } = await reader.read();
        if (done) return c.close();
        pending = value;
      }
      await Bun.sleep(o.ms);
      if (o.signal?.aborted) return c.error(o.signal.reason);
      c.enqueue(pending.subarray(0, o.chunk));
      pending = pending.subarray(o.chunk);
    },
    cancel: (why) => reader.cancel(why),
  });
}

export class LocalHub {
  readonly token = "hf_test_token";
  /** repo → commit → path → file */
  private readonly repos = new Map<string, Map<string, Map<string, RepoFile>>>();
  private readonly branches = new Map<string, string>(); // "repo@rev" → commit
  private readonly blobs = new Map<string, Uint8Array>();
  /** What storage serves instead of a blob's bytes (by SHA-256): the corruption tests. */
  readonly tampered = new Map<string, Uint8Array>();
  /** Blobs (by SHA-256) whose next download is cut after this many bytes. */
  readonly cutOnce = new Map<string, number>();
  readonly storageSeen: { path: string; range: string | null; auth: string | null }[] = [];
  readonly hubSeen: { path: string; auth: string | null }[] = [];
  private readonly storage: ReturnType<typeof Bun.serve>;
  private readonly hub: ReturnType<typeof Bun.serve>;
  readonly endpoint: string;

  constructor() {
    this.storage = Bun.serve({ port: 0, fetch: (req) => this.serveBlob(req) });
    this.hub = Bun.serve({ port: 0, fetch: (req) => this.serveHub(req) });
    this.endpoint = `http://127.0.0.1:${this.hub.port}`;
  }

  addRepo(repo: string, commit: string, files: Record<string, RepoFile>, branch = "main"): void {
    const commits = this.repos.get(repo) ?? new Map();
    commits.set(commit, new Map(Object.entries(files)));
    this.repos.set(repo, commits);
    this.branches.set(`${repo}@${branch}`, commit);
    this.branches.set(`${repo}@${commit}`, commit);
  }

  stop(): void {
    this.storage.stop(true);
    this.hub.stop(true);
  }

  private serveBlob(req: Request): Response {
    const url = new URL(req.url);
    const range = req.headers.get("range");
    this.storageSeen.push({ path: url.pathname, range, auth: req.headers.get("authorization") });
    const key = url.pathname.slice("/blob/".length);
    const bytes = this.tampered.get(key) ?? this.blobs.get(key);
    if (!bytes) return new Response("no such blob", { status: 404 });
    const from = Number(/^bytes=(\d+)-$/.exec(range ?? "")?.[1] ?? 0);
    const cut = this.cutOnce.get(key);
    if (cut !== undefined) {
      this.cutOnce.delete(key);
      // promise the whole file, send `cut` bytes, end the connection
      const stream = new ReadableStream({
        start(c) {
          c.enqueue(bytes.subarray(from, cut));
          setTimeout(() => c.close(), 30);
        },
      });
      return new Response(stream, { status: from ? 206 : 200, headers: { "content-length": String(bytes.length - from), ...(from ? { "content-range": `bytes ${from}-${bytes.length - 1}/${bytes.length}` } : {}) } });
    }
    if (from) return new Response(new Blob([Buffer.from(bytes.subarray(from))]), { status: 206, headers: { "content-range": `bytes ${from}-${bytes.length - 1}/${bytes.length}` } });
    return new Response(new Blob([Buffer.from(bytes)]));
  }

  private serveHub(req: Request): Response {
    const url = new URL(req.url);
    const auth = req.headers.get("authorization");
    this.hubSeen.push({ path: url.pathname, auth });
    const m = /^\/(?:api\/models\/)?([^/]+\/[^/]+)\/(revision|tree|resolve)\/([^/]+)(?:\/(.*))?$/.exec(url.pathname);
    if (!m) return new Response("not found", { status: 404 });
    const [, repo, what, rev, rest] = m as unknown as [string, string, string, string, string | undefined];
    if (repo.endsWith("/gated") && auth !== `Bearer ${this.token}`) return Response.json({ error: `Access to model ${repo} is restricted.` }, { status: 401 });
    const commit = this.branches.get(`${repo}@${decodeURIComponent(rev)}`);
    const files = commit ? this.repos.get(repo)?.get(commit) : undefined;
    if (!commit || !files) return Response.json({ error: "Revision Not Found" }, { status: 404 });
    if (what === "revision") return Response.json({ id: repo, sha: commit });
    if (what === "tree") {
      // two entries per page, each page naming the next in a Link header, plus a directory entry
      const pointer = (path: string) => new TextEncoder().encode(`pointer ${path}`);
      const all = [
        { type: "directory", path: "sub", oid: "0".repeat(40), size: 0 },
        ...[...files].map(([path, f]) => ({
          type: "file",
          path,
          size: f.lfs ? 134 : f.bytes.length,
          oid: f.lfs ? gitSha1(pointer(path)) : gitSha1(f.bytes),
          ...(f.lfs ? { lfs: { oid: sha256(f.bytes), size: f.bytes.length, pointerSize: 134 } } : {}),
        })),
      ];
      const page = Number(url.searchParams.get("cursor") ?? 0);
      const next = page + 2 < all.length ? `<${url.origin}${url.pathname}?recursive=true&cursor=${page + 2}>; rel="next"` : null;
      return Response.json(all.slice(page, page + 2), { headers: next ? { link: next } : {} });
    }
    const f = files.get(decodeURIComponent(rest ?? ""));
    if (!f) return new Response("Entry not found", { status: 404 });
    const key = sha256(f.bytes);
    this.blobs.set(key, f.bytes);
    return new Response(null, { status: 302, headers: { location: `http://localhost:${this.storage.port}/blob/${key}` } });
  }
}
