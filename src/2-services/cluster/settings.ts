import { readFileSync } from "node:fs";
import type { Config } from "../../lib/config";

// What a node of a cluster needs besides the shared store: how the other nodes reach it and the
// secret that signs the hops between them (hop.ts). Both are required with a PostgreSQL store —
// a node the others cannot reach, or whose hops they cannot check, would be a node in name only.

export const MIN_SECRET_CHARS = 32;

export class ClusterSettingsError extends Error {}

/** The cluster's secret: `[cluster] secret`, else the file `secret_file` names; "" when neither is set. */
export function clusterSecretOf(cluster: Config["cluster"]): string {
  if (cluster.secret) return cluster.secret;
  if (!cluster.secret_file) return "";
  try {
    return readFileSync(cluster.secret_file, "utf8").trimEnd();
  } catch (e) {
    throw new ClusterSettingsError(`cluster.secret_file: cannot read ${cluster.secret_file} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
  }
}

export interface ClusterSettings {
  secret: string;
  /** This node's URL for the others, once its port is known. */
  advertiseUrl: (port: number) => string;
}

/** The settings a node on a PostgreSQL store starts with; throws naming what is missing. */
export function clusterSettingsOf(cluster: Config["cluster"]): ClusterSettings {
  if (!cluster.advertise_url)
    throw new ClusterSettingsError(
      'cluster.advertise_url is required with a PostgreSQL store: how the other nodes reach this one, e.g. "http://10.0.0.5:8080" (`{port}` stands for the port it listens on)',
    );
  const secret = clusterSecretOf(cluster);
  if (!secret) throw new ClusterSettingsError("cluster.secret (or cluster.secret_file) is required with a PostgreSQL store: the secret every node shares, which signs the hops between them (e.g. `openssl rand -hex 32`)");
  if (secret.length < MIN_SECRET_CHARS) throw new ClusterSettingsError(`cluster.secret: at least ${MIN_SECRET_CHARS} characters (it has ${secret.length}); e.g. \`openssl rand -hex 32\``);
  return { secret, advertiseUrl: (port) => advertisedUrl(cluster.advertise_url, port) };
}

/** `[cluster] advertise_url` for a node listening on `port` (`{port}` stands for it). */
export function advertisedUrl(advertise: string, port: number): string {
  return advertise.replace(/\/+$/, "").replaceAll("{port}", String(port));
}
