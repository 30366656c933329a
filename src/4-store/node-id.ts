import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { randomBase62 } from "../lib/ids";

// A node's stable id (issue 45): made once, kept in its data dir, so a restart is the same node.

export const NODE_ID_FILE = "node-id";

export function nodeIdOf(dataDir: string): string {
  const path = join(dataDir, NODE_ID_FILE);
  if (existsSync(path)) {
    const id = readFileSync(path, "utf8").trim();
    if (/^node_[0-9A-Za-z]{12}$/.test(id)) return id;
  }
  const id = `node_${randomBase62(12)}`;
  writeFileSync(path, id + "\n", { mode: 0o600 });
  return id;
}
