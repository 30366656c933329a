import { createHash } from "node:crypto";
import { closeSync, openSync, readSync, writeSync } from "node:fs";

// A minimal POSIX ustar writer and reader for backups: regular files only, names ≤ 100 bytes,
// streamed in 1 MiB chunks (files may be large), each entry's SHA-256 computed on the way.
// `tar tf backup.tar` lists what `appliance backup` wrote.

const BLOCK = 512;
const CHUNK = 1 << 20;

function header(name: string, size: number, mtime: number): Buffer {
  const h = Buffer.alloc(BLOCK);
  if (Buffer.byteLength(name) > 100) throw new Error(`tar: name too long: ${name}`);
  h.write(name, 0, 100, "utf8");
  h.write("0000600\0", 100, 8, "ascii"); // mode
  h.write("0000000\0", 108, 8, "ascii"); // uid
  h.write("0000000\0", 116, 8, "ascii"); // gid
  h.write(size.toString(8).padStart(11, "0") + "\0", 124, 12, "ascii");
  h.write(Math.floor(mtime / 1000).toString(8).padStart(11, "0") + "\0", 136, 12, "ascii");
  h.write("        ", 148, 8, "ascii"); // checksum placeholder
  h.write("0", 156, 1, "ascii"); // regular file
  h.write("ustar\u000000", 257, 8, "ascii");
  let sum = 0;
  for (const b of h) sum += b;
  h.write(sum.toString(8).padStart(6, "0") + "\0 ", 148, 8, "ascii");
  return h;
}

export class TarWriter {
  private fd: number;
  constructor(path: string) {
    this.fd = openSync(path, "w", 0o600);
  }

  /** Appends `bytes` under `name`; returns its SHA-256. */
  addBytes(name: string, bytes: Uint8Array, mtime = Date.now()): string {
    writeSync(this.fd, header(name, bytes.length, mtime));
    writeSync(this.fd, bytes);
    this.pad(bytes.length);
    return createHash("sha256").update(bytes).digest("hex");
  }

  /** Appends the file at `path` (of `size` bytes, read in chunks) under `name`; returns its SHA-256. */
  addFile(name: string, path: string, size: number, mtime = Date.now()): string {
    writeSync(this.fd, header(name, size, mtime));
    const hash = createHash("sha256");
    const src = openSync(path, "r");
    try {
      const buf = Buffer.alloc(CHUNK);
      let done = 0;
      while (done < size) {
        const n = readSync(src, buf, 0, Math.min(CHUNK, size - done), done);
        if (n === 0) throw new Error(`${path} is shorter than ${size} bytes`);
        writeSync(this.fd, buf.subarray(0, n));
        hash.update(buf.subarray(0, n));
        done += n;
      }
    } finally {
      closeSync(src);
    }
    this.pad(size);
    return hash.digest("hex");
  }

  close() {
    writeSync(this.fd, Buffer.alloc(BLOCK * 2));
    closeSync(this.fd);
  }

  private pad(size: number) {
    const rest = size % BLOCK;
    if (rest) writeSync(this.fd, Buffer.alloc(BLOCK - rest));
  }
}

export interface TarEntry {
  name: string;
  size: number;
  /** Byte offset of the entry's data in the archive. */
  offset: number;
}

/** The entries of an archive (headers checked), without reading their data. */
export function listTar(path: string): TarEntry[] {
  const fd = openSync(path, "r");
  try {
    const entries: TarEntry[] = [];
    const h = Buffer.alloc(BLOCK);
    let pos = 0;
    for (;;) {
      if (readSync(fd, h, 0, BLOCK, pos) < BLOCK) throw new Error("the archive ends before its end marker");
      if (h.every((b) => b === 0)) return entries;
      let sum = 0;
      for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 32 : h[i]!;
      if (sum !== parseInt(h.toString("ascii", 148, 156).replace(/\0.*$/, "").trim(), 8)) throw new Error(`bad header checksum at byte ${pos}`);
      const name = h.toString("utf8", 0, 100).replace(/\0.*$/s, "");
      const size = parseInt(h.toString("ascii", 124, 136).replace(/\0.*$/, "").trim(), 8);
      if (!name || !Number.isFinite(size) || size < 0) throw new Error(`bad header at byte ${pos}`);
      entries.push({ name, size, offset: pos + BLOCK });
      pos += BLOCK + Math.ceil(size / BLOCK) * BLOCK;
    }
  } finally {
    closeSync(fd);
  }
}

/** Copies one entry's data to `dest` (or only hashes it when dest is null); returns its SHA-256. */
export function extractEntry(archive: string, e: TarEntry, dest: string | null): string {
  const src = openSync(archive, "r");
  const out = dest ? openSync(dest, "w", 0o600) : null;
  const hash = createHash("sha256");
  try {
    const buf = Buffer.alloc(CHUNK);
    let done = 0;
    while (done < e.size) {
      const n = readSync(src, buf, 0, Math.min(CHUNK, e.size - done), e.offset + done);
      if (n === 0) throw new Error(`${e.name}: the archive is truncated`);
      if (out !== null) writeSync(out, buf.subarray(0, n));
      hash.update(buf.subarray(0, n));
      done += n;
    }
  } finally {
    closeSync(src);
    if (out !== null) closeSync(out);
  }
  return hash.digest("hex");
}
