import { afterAll, afterEach, expect, test } from "bun:test";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { join } from "node:path";
import type { DownloadEntry } from "../../models/catalogue";
import { ChecksumError, PullError, pullModel, type PullProgress } from "../../src/ops/pull/pull";
import { tempDir } from "../helpers/app";

// The downloader against a local HTTP server written on raw sockets, so a test decides exactly
// what each request gets: the whole file, a range, a connection cut mid-body, other bytes.

const root = tempDir("appliance-pull-");
afterAll(() => rmSync(root, { recursive: true, force: true }));

interface Seen {
  path: string;
  range: string | null;
}

/** What to answer the n-th request (0-based): honour ranges by default. */
type Plan = (req: Seen, n: number, body: Uint8Array) => { status?: number; body?: Uint8Array; cutAfter?: number; ignoreRange?: boolean };

interface FileServer {
  url: string;
  requests: Seen[];
  close(): Promise<void>;
}

const servers: FileServer[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});

async function serve(files: Record<string, Uint8Array>, plan: Plan = () => ({})): Promise<FileServer> {
  const requests: Seen[] = [];
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => undefined);
    let head = "";
    socket.on("data", (chunk) => {
      head += chunk.toString("latin1");
      if (!head.includes("\r\n\r\n")) return;
      const [requestLine, ...lines] = head.split("\r\n");
      const path = requestLine!.split(" ")[1]!;
      const range = lines.find((l) => /^range:/i.test(l))?.replace(/^range:\s*/i, "") ?? null;
      const seen = { path, range };
      requests.push(seen);
      const file = files[path];
      const answer = plan(seen, requests.length - 1, file ?? new Uint8Array());
      let status = answer.status ?? (file ? 200 : 404);
      let body = answer.body ?? file ?? new TextEncoder().encode("not found");
      const headers: string[] = [];
      const m = /^bytes=(\d+)-$/.exec(range ?? "");
      if (m && status === 200 && !answer.ignoreRange) {
        const start = Number(m[1]);
        if (start >= body.length) {
          status = 416;
          headers.push(`content-range: bytes */${body.length}`);
          body = new Uint8Array();
        } else {
          status = 206;
          headers.push(`content-range: bytes ${start}-${body.length - 1}/${body.length}`);
          body = body.subarray(start);
        }
      }
      const reason = { 200: "OK", 206: "Partial Content", 404: "Not Found", 416: "Range Not Satisfiable", 503: "Service Unavailable" }[status] ?? "X";
      socket.write(`HTTP/1.1 ${status} ${reason}\r\ncontent-length: ${body.length}\r\nconnection: close\r\n${headers.map((h) => h + "\r\n").join("")}\r\n`);
      // The cut comes a moment after the bytes: a client drops what it has not read yet when the
      // connection dies, and the test wants to know exactly where the resume starts.
      if (answer.cutAfter !== undefined) socket.write(body.subarray(0, answer.cutAfter), () => setTimeout(() => socket.destroy(), 150));
      else socket.end(body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  const s = {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
  servers.push(s);
  return s;
}

const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

function entry(id: string, url: string, files: Record<string, { name: string; path: string; body: Uint8Array; sha256?: string | null; bytes?: number | null }>): DownloadEntry {
  return {
    id,
    name: id,
    kind: "embedding",
    description: "test",
    max_context: 512,
    files: Object.fromEntries(
      Object.entries(files).map(([role, f]) => [
        role,
        { url: `${url}/${f.name}`, path: f.path, bytes: f.bytes === undefined ? f.body.length : f.bytes, sha256: f.sha256 === undefined ? sha(f.body) : f.sha256 },
      ]),
    ),
  };
}

let n = 0;
function modelsDir(): string {
  const d = join(root, `models-${++n}`);
  mkdirSync(d);
  return d;
}

const weights = randomBytes(384 * 1024);
const config = new TextEncoder().encode('{"model_type":"bert"}');

test("a full download lands verified at its final path, .part and lock gone", async () => {
  const s = await serve({ "/weights.onnx": weights, "/config.json": config });
  const dir = modelsDir();
  const progress: PullProgress[] = [];
  const e = entry("full", s.url, {
    weights: { name: "weights.onnx", path: "onnx/model.onnx", body: weights },
    config: { name: "config.json", path: "config.json", body: config },
  });
  const result = await pullModel(e, { modelsDir: dir, onProgress: (p) => progress.push(p) });

  expect(result.files.map((f) => [f.role, f.status, f.bytes])).toEqual([
    ["weights", "downloaded", weights.length],
    ["config", "downloaded", config.length],
  ]);
  expect(readFileSync(join(dir, "full/onnx/model.onnx")).equals(weights)).toBe(true);
  expect(readFileSync(join(dir, "full/config.json")).equals(Buffer.from(config))).toBe(true);
  expect(readdirSync(join(dir, "full")).sort()).toEqual(["config.json", "onnx"]);
  expect(readdirSync(join(dir, "full/onnx"))).toEqual(["model.onnx"]);
  expect(s.requests.map((r) => [r.path, r.range])).toEqual([
    ["/weights.onnx", null],
    ["/config.json", null],
  ]);
  expect(progress.filter((p) => p.phase === "done").map((p) => [p.file, p.bytesDone])).toEqual([
    ["onnx/model.onnx", weights.length],
    ["config.json", config.length],
  ]);
});

test("a download cut mid-body resumes with a Range request and ends verified", async () => {
  const cut = 100_000;
  const s = await serve({ "/w.bin": weights }, (_req, i) => (i === 0 ? { cutAfter: cut } : {}));
  const dir = modelsDir();
  const retries: PullProgress[] = [];
  await pullModel(entry("resume", s.url, { model: { name: "w.bin", path: "w.bin", body: weights } }), {
    modelsDir: dir,
    retryDelayMs: 1,
    onProgress: (p) => p.phase === "retry" && retries.push(p),
  });

  expect(s.requests.map((r) => r.range)).toEqual([null, `bytes=${cut}-`]);
  expect(retries).toHaveLength(1);
  expect(retries[0]!.bytesDone).toBe(cut);
  expect(readFileSync(join(dir, "resume/w.bin")).equals(weights)).toBe(true);
  expect(existsSync(join(dir, "resume/w.bin.part"))).toBe(false);
});

test("other bytes than the catalogue's are refused: nothing at the final path, the .part deleted", async () => {
  const other = randomBytes(weights.length);
  const s = await serve({ "/w.bin": other });
  const dir = modelsDir();
  const e = entry("corrupt", s.url, { model: { name: "w.bin", path: "w.bin", body: weights } });
  const error = await pullModel(e, { modelsDir: dir }).catch((x) => x);

  expect(error).toBeInstanceOf(ChecksumError);
  expect(error.message).toContain("w.bin: checksum mismatch");
  expect(error.message).toContain(`expected sha256 ${sha(weights)}`);
  expect(error.message).toContain(`got ${sha(other)}`);
  expect(existsSync(join(dir, "corrupt/w.bin"))).toBe(false);
  expect(existsSync(join(dir, "corrupt/w.bin.part"))).toBe(false);
  expect(s.requests).toHaveLength(1);
});

test("a server that ignores Range (200) restarts the download from byte 0", async () => {
  const s = await serve({ "/w.bin": weights }, () => ({ ignoreRange: true }));
  const dir = modelsDir();
  // A stale .part whose bytes are not the file's: appended to, the result could never verify.
  mkdirSync(join(dir, "norange"));
  writeFileSync(join(dir, "norange/w.bin.part"), randomBytes(50_000));
  await pullModel(entry("norange", s.url, { model: { name: "w.bin", path: "w.bin", body: weights } }), { modelsDir: dir });

  expect(s.requests.map((r) => r.range)).toEqual(["bytes=50000-"]);
  expect(readFileSync(join(dir, "norange/w.bin")).equals(weights)).toBe(true);
  expect(existsSync(join(dir, "norange/w.bin.part"))).toBe(false);
});

test("a .part the server has nothing past (416) is started over", async () => {
  const s = await serve({ "/w.bin": weights });
  const dir = modelsDir();
  mkdirSync(join(dir, "past-end"));
  writeFileSync(join(dir, "past-end/w.bin.part"), randomBytes(weights.length));
  // Size not recorded, so only the server can say the .part is already as long as the file.
  await pullModel(entry("past-end", s.url, { model: { name: "w.bin", path: "w.bin", body: weights, bytes: null } }), { modelsDir: dir });

  expect(s.requests.map((r) => r.range)).toEqual([`bytes=${weights.length}-`, null]);
  expect(readFileSync(join(dir, "past-end/w.bin")).equals(weights)).toBe(true);
});

test("a file already in place with the right size is skipped; --verify re-hashes and replaces a bad one", async () => {
  const s = await serve({ "/w.bin": weights });
  const dir = modelsDir();
  const e = entry("present", s.url, { model: { name: "w.bin", path: "w.bin", body: weights } });
  mkdirSync(join(dir, "present"));
  const sameSize = randomBytes(weights.length);
  writeFileSync(join(dir, "present/w.bin"), sameSize);

  const skipped = await pullModel(e, { modelsDir: dir });
  expect(skipped.files[0]!.status).toBe("present");
  expect(s.requests).toHaveLength(0);

  const verified = await pullModel(e, { modelsDir: dir, verify: true });
  expect(verified.files[0]!.status).toBe("downloaded");
  expect(s.requests).toHaveLength(1);
  expect(readFileSync(join(dir, "present/w.bin")).equals(weights)).toBe(true);

  const again = await pullModel(e, { modelsDir: dir, verify: true });
  expect(again.files[0]!.status).toBe("present");
  expect(s.requests).toHaveLength(1);
});

test("a file with no recorded checksum is refused unless unverified files are allowed", async () => {
  const s = await serve({ "/w.bin": weights });
  const dir = modelsDir();
  const e = entry("unverified", s.url, { model: { name: "w.bin", path: "weights/w.bin", body: weights, sha256: null, bytes: null } });
  const error = await pullModel(e, { modelsDir: dir }).catch((x) => x);

  expect(error).toBeInstanceOf(PullError);
  expect(error.message).toContain("no checksum recorded for weights/w.bin; refusing to download unverified weights");
  expect(s.requests).toHaveLength(0);
  expect(existsSync(join(dir, "unverified/weights/w.bin"))).toBe(false);

  const taken = await pullModel(e, { modelsDir: dir, allowUnverified: true });
  expect(taken.files[0]).toMatchObject({ status: "downloaded", bytes: weights.length, sha256: sha(weights) });
  expect(readFileSync(join(dir, "unverified/weights/w.bin")).equals(weights)).toBe(true);
});

test("HTTP 404 fails at once with the URL; 503 is retried", async () => {
  let busyOnce = true;
  const s = await serve({ "/w.bin": weights }, (req) => (req.path === "/w.bin" && busyOnce ? ((busyOnce = false), { status: 503, body: new Uint8Array() }) : {}));
  const dir = modelsDir();
  const missing = entry("missing", s.url, { model: { name: "nope.bin", path: "w.bin", body: weights } });
  const error = await pullModel(missing, { modelsDir: dir, retryDelayMs: 1 }).catch((x) => x);
  expect(error).toBeInstanceOf(PullError);
  expect(error.message).toContain(`${s.url}/nope.bin: HTTP 404`);

  const busy = entry("busy", s.url, { model: { name: "w.bin", path: "w.bin", body: weights } });
  await pullModel(busy, { modelsDir: dir, retryDelayMs: 1 });
  expect(s.requests.map((r) => r.path)).toEqual(["/nope.bin", "/w.bin", "/w.bin"]);
  expect(readFileSync(join(dir, "busy/w.bin")).equals(weights)).toBe(true);
});

test("an aborted pull keeps its .part for the next run", async () => {
  const s = await serve({ "/w.bin": weights }, (_req, i) => (i === 0 ? { cutAfter: 64 * 1024 } : {}));
  const dir = modelsDir();
  const controller = new AbortController();
  const e = entry("aborted", s.url, { model: { name: "w.bin", path: "w.bin", body: weights } });
  const error = await pullModel(e, {
    modelsDir: dir,
    retryDelayMs: 60_000,
    signal: controller.signal,
    onProgress: (p) => p.phase === "retry" && controller.abort(new Error("stop")),
  }).catch((x) => x);

  expect(error.message).toBe("stop");
  expect(readFileSync(join(dir, "aborted/w.bin.part")).equals(weights.subarray(0, 64 * 1024))).toBe(true);
  expect(existsSync(join(dir, "aborted/.pull.lock"))).toBe(false);
  await pullModel(e, { modelsDir: dir });
  expect(s.requests.map((r) => r.range)).toEqual([null, `bytes=${64 * 1024}-`]);
  expect(readFileSync(join(dir, "aborted/w.bin")).equals(weights)).toBe(true);
});

test("every catalogue file in models/catalogue is embedded (the executable has no models folder)", async () => {
  const { readdirSync } = await import("node:fs");
  const { CATALOGUE_DIR, EMBEDDED_CATALOGUE, catalogue } = await import("../../models/catalogue");
  expect(Object.keys(EMBEDDED_CATALOGUE).sort()).toEqual(readdirSync(CATALOGUE_DIR).filter((n) => n.endsWith(".json")).sort());
  expect(catalogue().map((e) => e.id).sort()).toEqual(catalogue(CATALOGUE_DIR).map((e) => e.id).sort());
});
