import { Database } from "bun:sqlite";
import { closeSync, existsSync, mkdirSync, openSync, readSync, renameSync, rmSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { randomBase62 } from "../lib/ids";
import { VERSION } from "../lib/version";
import { DB_FILE, MIGRATIONS, openStore } from "./db";
import { lockDataDir } from "./lock";
import { extractEntry, listTar, TarWriter } from "./tar";

// `appliance backup FILE` / `appliance restore FILE`: a consistent online copy of the store
// (SQLite's VACUUM INTO reads one snapshot, so a running server keeps serving) plus the stored
// files the snapshot's index names, in one tar with a manifest of sizes and SHA-256s. Restore
// checks every entry before anything in the data dir is touched, under the data dir's server lock.

export const BACKUP_FORMAT = "appliance-backup/1";
const MANIFEST = "manifest.json";

export interface BackupManifest {
  format: typeof BACKUP_FORMAT;
  version: string;
  /** The store's schema (migrations applied). */
  schema: number;
  created_at: string;
  entries: { name: string; bytes: number; sha256: string }[];
}

export class BackupError extends Error {}

export function backupDataDir(dataDir: string, out: string): BackupManifest {
  const dbPath = join(dataDir, DB_FILE);
  if (!existsSync(dbPath)) throw new BackupError(`no store in ${dataDir} (${DB_FILE} not found)`);
  const snapshot = join(dirname(out), `.appliance-backup-${randomBase62(8)}.sqlite`);
  const partial = `${out}.partial`;
  try {
    const src = new Database(dbPath, { readonly: true });
    try {
      src.exec("PRAGMA busy_timeout = 10000");
      src.query("VACUUM INTO ?").run(snapshot);
    } finally {
      src.close();
    }
    const snap = new Database(snapshot, { readonly: true });
    const schema = (snap.query("PRAGMA user_version").get() as { user_version: number }).user_version;
    const files = snap.query("SELECT id, bytes FROM files WHERE deleted_at IS NULL ORDER BY id").all() as { id: string; bytes: number }[];
    snap.close();

    const tar = new TarWriter(partial);
    const entries: BackupManifest["entries"] = [];
    try {
      entries.push({ name: DB_FILE, bytes: statSync(snapshot).size, sha256: tar.addFile(DB_FILE, snapshot, statSync(snapshot).size) });
      for (const f of files) {
        const path = join(dataDir, "files", f.id);
        const size = existsSync(path) ? statSync(path).size : -1;
        if (size !== f.bytes) throw new BackupError(`stored file ${f.id} is ${size < 0 ? "missing" : `${size} bytes, not ${f.bytes}`} (${path})`);
        entries.push({ name: `files/${f.id}`, bytes: size, sha256: tar.addFile(`files/${f.id}`, path, size) });
      }
      const manifest: BackupManifest = { format: BACKUP_FORMAT, version: VERSION, schema, created_at: new Date().toISOString(), entries };
      tar.addBytes(MANIFEST, Buffer.from(JSON.stringify(manifest, null, 2)));
      tar.close();
      renameSync(partial, out);
      return manifest;
    } catch (e) {
      try {
        tar.close();
      } catch {}
      throw e;
    }
  } finally {
    rmSync(snapshot, { force: true });
    rmSync(partial, { force: true });
  }
}

/** The manifest of a backup, with every entry it names present at its size. */
export function readBackup(archive: string): BackupManifest {
  if (!existsSync(archive)) throw new BackupError(`${archive}: no such file`);
  let list;
  try {
    list = listTar(archive);
  } catch (e) {
    throw new BackupError(`${archive} is not an appliance backup (${(e as Error).message})`);
  }
  const m = list.find((e) => e.name === MANIFEST);
  if (!m) throw new BackupError(`${archive} is not an appliance backup (no ${MANIFEST})`);
  const buf = Buffer.alloc(m.size);
  const fd = openSync(archive, "r");
  readSync(fd, buf, 0, m.size, m.offset);
  closeSync(fd);
  const manifest = JSON.parse(buf.toString("utf8")) as BackupManifest;
  if (manifest.format !== BACKUP_FORMAT) throw new BackupError(`${archive}: unknown backup format ${JSON.stringify(manifest.format)}`);
  if (manifest.schema > MIGRATIONS.length)
    throw new BackupError(`${archive} was made by a newer appliance (${manifest.version}, store schema ${manifest.schema}; this one knows ${MIGRATIONS.length})`);
  for (const e of manifest.entries) {
    const found = list.find((x) => x.name === e.name);
    if (!found || found.size !== e.bytes) throw new BackupError(`${archive}: entry ${e.name} is ${found ? `${found.size} bytes, not ${e.bytes}` : "missing"}`);
  }
  return manifest;
}

/**
 * Restores `archive` into `dataDir`. Refuses while a server uses the data dir, and over an existing
 * store unless `force` (the replaced store is kept beside it as appliance.sqlite.before-restore-<time>).
 */
export function restoreDataDir(archive: string, dataDir: string, opts: { force?: boolean } = {}): { manifest: BackupManifest; keptAs: string | null } {
  const manifest = readBackup(archive);
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const unlock = lockDataDir(dataDir);
  const staging = join(dataDir, `.restore-${randomBase62(8)}`);
  try {
    const dbPath = join(dataDir, DB_FILE);
    if (existsSync(dbPath) && !opts.force) throw new BackupError(`${dataDir} already has a store; --force replaces it (the current one is kept beside it)`);
    // Every entry is extracted and checked before the data dir changes.
    const list = listTar(archive);
    mkdirSync(join(staging, "files"), { recursive: true });
    for (const e of manifest.entries) {
      const entry = list.find((x) => x.name === e.name)!;
      const sha = extractEntry(archive, entry, join(staging, e.name));
      if (sha !== e.sha256) throw new BackupError(`${archive}: ${e.name} is damaged (sha256 ${sha}, expected ${e.sha256}); nothing was restored`);
    }
    let keptAs: string | null = null;
    if (existsSync(dbPath)) {
      const old = new Database(dbPath);
      old.exec("PRAGMA wal_checkpoint(TRUNCATE)");
      old.close();
      keptAs = `${dbPath}.before-restore-${new Date().toISOString().replace(/[:.]/g, "-")}`;
      renameSync(dbPath, keptAs);
      for (const ext of ["-wal", "-shm"]) rmSync(dbPath + ext, { force: true });
    }
    mkdirSync(join(dataDir, "files"), { recursive: true, mode: 0o700 });
    for (const e of manifest.entries) renameSync(join(staging, e.name), join(dataDir, e.name));
    // Migrations bring an older backup's schema up to date; the integrity check reads every page.
    const db = openStore(dataDir);
    const check = (db.query("PRAGMA integrity_check").get() as { integrity_check: string }).integrity_check;
    db.close();
    if (check !== "ok") throw new BackupError(`the restored store fails SQLite's integrity check: ${check}`);
    return { manifest, keptAs };
  } finally {
    rmSync(staging, { recursive: true, force: true });
    unlock();
  }
}
