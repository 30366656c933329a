// One interface between the rental state machine (src/2-services/rentals/service.ts) and whatever starts a
// JupyterLab on a GPU: the state machine and billing know nothing of processes or containers.

/** What a launcher needs to start one rental. */
export interface LaunchSpec {
  rentalId: string;
  /** The GPU(s) to hand out: UUIDs as nvidia-smi reports them (`GPU-…`), or indexes. */
  gpus: string[];
  /**
   * The access token the notebook server must require. Passed in its environment
   * (`JUPYTER_TOKEN`), never on its command line, which every local user can read.
   */
  token: string;
  /** A directory owned by this rental (working dir / logs). */
  workDir: string;
  /**
   * Set when the rental is reached through the appliance's own port (`rentals.access = "proxy"`,
   * src/2-services/rentals/access.ts): the path the notebook server serves under, `/rentals/{id}/` (Jupyter's
   * `base_url`). The launcher then binds it where only this machine reaches it (127.0.0.1) and
   * records that address as the handle's `proxy`.
   */
  basePath?: string;
}

/** Where the appliance's proxy reaches a rental's notebook server (proxy mode only). */
export interface ProxyTarget {
  /** `http://127.0.0.1:PORT`: the loopback address the server (or its published port) listens on. */
  upstream: string;
  /** The server's `base_url`, `/rentals/{id}/`. */
  basePath: string;
}

/**
 * What a launcher records about a started rental: stored as JSON with the rental, so a restarted
 * server can find the process/container again. Launcher-specific fields live in `data`.
 */
export interface LaunchHandle {
  launcher: string;
  /** The URL the owner opens (token not included; `connection.token` carries it); in proxy mode the upstream's own URL, which only this machine reaches. */
  url: string;
  data: Record<string, unknown>;
  /** Set when it was started for the proxy (`LaunchSpec.basePath`). */
  proxy?: ProxyTarget;
}

/**
 * What identifies a launch before it starts (the process launcher's environment tag, the docker
 * launcher's container name): stored with the rental before `start` is called, so a server killed
 * mid-launch, before it could record the handle, finds and stops what it started when it comes
 * back.
 */
export interface LaunchIntent {
  launcher: string;
  data: Record<string, unknown>;
}

export type Liveness = "starting" | "ready" | "dead";

export interface Launcher {
  readonly name: string;
  /** What `start(spec)` will start, as a restarted server finds it; pure (starts nothing). */
  intent(spec: LaunchSpec): LaunchIntent;
  /** Starts the notebook server; resolves once it was started (not necessarily ready). */
  start(spec: LaunchSpec): Promise<LaunchHandle>;
  /** Whether the started server answers yet (`ready`), is still coming up, or is gone (`dead`). */
  probe(handle: LaunchHandle): Promise<Liveness>;
  /** Stops it and releases the GPU; safe to call on something already gone. */
  stop(handle: LaunchHandle): Promise<void>;
  /**
   * Stops whatever a launch with this intent started, found without a handle; safe when it started
   * nothing. Throws when it cannot tell (the Docker daemon does not answer): then something may
   * still hold the GPU.
   */
  reclaim(intent: LaunchIntent): Promise<void>;
  /**
   * The last `maxBytes` of the notebook server's stdout and stderr (for the owner), also after it
   * stopped; "" when there is none.
   */
  logs(handle: LaunchHandle, maxBytes: number): Promise<string>;
  /** Whether it can start rentals now: null when healthy, else what is wrong and how to fix it. */
  health(): Promise<string | null>;
}
