import type { SQL } from "bun";
import type { NodeRow, NodeStore } from "../nodes";
import { DB_NOW_MS as NOW } from "./db";

// The nodes of a cluster on PostgreSQL (the interface: ../nodes.ts), on the asynchronously
// committing pool: a beat lost with a crash of the database is the next beat's to make.

const rowOf = (r: Record<string, any>): NodeRow => ({
  id: r.id,
  url: r.url,
  version: r.version,
  startedAt: Number(r.started_at),
  heartbeatAt: Number(r.heartbeat_at),
  ageMs: Number(r.age_ms),
  models: JSON.parse(r.models),
  gpus: JSON.parse(r.gpus),
  settings: JSON.parse(r.settings),
  draining: r.draining === true,
});

export function postgresNodeStore(fast: SQL): NodeStore {
  return {
    async register(n) {
      await fast.unsafe(
        `INSERT INTO cluster_nodes (id, url, version, started_at, heartbeat_at, models, gpus, settings)
         VALUES ($1, $2, $3, $4, ${NOW}, $5, $6, $7)
         ON CONFLICT (id) DO UPDATE SET url = EXCLUDED.url, version = EXCLUDED.version, started_at = EXCLUDED.started_at,
           heartbeat_at = EXCLUDED.heartbeat_at, models = EXCLUDED.models, gpus = EXCLUDED.gpus, settings = EXCLUDED.settings`,
        [n.id, n.url, n.version, n.startedAt, JSON.stringify(n.models), JSON.stringify(n.gpus), JSON.stringify(n.settings)],
      );
    },
    async beat(id, now) {
      const [r] = await fast.unsafe(`UPDATE cluster_nodes SET heartbeat_at = ${NOW}, models = $2, gpus = $3 WHERE id = $1 RETURNING draining`, [
        id,
        JSON.stringify(now.models),
        JSON.stringify(now.gpus),
      ]);
      return r ? { draining: r.draining === true } : null;
    },
    async list() {
      return (await fast.unsafe(`SELECT *, ${NOW} - heartbeat_at AS age_ms FROM cluster_nodes ORDER BY started_at, id`)).map(rowOf);
    },
    async setDraining(id, draining) {
      return (await fast`UPDATE cluster_nodes SET draining = ${draining} WHERE id = ${id} RETURNING id`).length > 0;
    },
  };
}
