// Starts a rental's JupyterLab as a Docker container through the Docker Engine API on its unix
// socket (https://docs.docker.com/reference/api/engine/version/v1.43/). The appliance never pulls
// images: the image must already be on the machine.
import { join } from "node:path";
import { writeFileSync } from "node:fs";
import { LOG_FILE, tailOf } from "./log-tail";
import { proxyFlags } from "../access";
import type { LaunchHandle, LaunchIntent, LaunchSpec, Launcher, Liveness } from "./types";

export interface DockerLauncherOptions {
  /** The Engine API socket; default `/var/run/docker.sock`. */
  socketPath?: string;
  /** The notebook image, already pulled (`docker pull`). */
  image: string;
  /** The host or IP the owner connects to, for the rental's URL. */
  hostAddress: string;
  /** The Engine API version prefix; default `v1.43`. */
  apiVersion?: string;
  /** Where the probe reaches the published port; default `127.0.0.1`. */
  probeHost?: string;
  /** For tests: what talks to the Engine API. */
  fetch?: typeof fetch;
  /** For tests: what probes the notebook server. */
  probeFetch?: typeof fetch;
}

const JUPYTER_PORT = "8888/tcp";
const WORK_DIR = "/home/jovyan/work";
const PROBE_TIMEOUT_MS = 2_000;

interface EngineReply {
  status: number;
  body: any;
}

export function createDockerLauncher(opts: DockerLauncherOptions): Launcher {
  const socketPath = opts.socketPath ?? "/var/run/docker.sock";
  const apiVersion = opts.apiVersion ?? "v1.43";
  const probeHost = opts.probeHost ?? "127.0.0.1";
  const engineFetch = opts.fetch ?? fetch;
  const probeFetch = opts.probeFetch ?? fetch;

  function send(method: string, path: string, body?: unknown): Promise<Response> {
    // Over a unix socket the URL's host is never resolved; the daemon only reads the path.
    return engineFetch(`http://docker/${apiVersion}${path}`, {
      method,
      unix: socketPath,
      headers: body === undefined ? undefined : { "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  }

  async function engine(method: string, path: string, body?: unknown): Promise<EngineReply> {
    const res = await send(method, path, body);
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {}
    return { status: res.status, body: parsed };
  }

  async function remove(id: string): Promise<void> {
    const res = await engine("DELETE", `${containerPath(id)}?force=true`);
    // 404: already gone; 409: the daemon is already removing it.
    if (res.status !== 204 && res.status !== 404 && res.status !== 409) throw engineError("remove container", res);
  }

  return {
    name: "docker",

    // The container's name is fixed by the rental id, so a server that died before it recorded the
    // container id finds it by name.
    intent: (spec: LaunchSpec): LaunchIntent => ({ launcher: "docker", data: { container: containerName(spec.rentalId) } }),

    async reclaim(intent: LaunchIntent): Promise<void> {
      const name = intent.data.container;
      if (typeof name !== "string" || name === "") throw new Error("docker: the launch intent names no container");
      // As stop(), with 404 (never created) taken as done; an unreachable daemon throws.
      await engine("POST", `${containerPath(name)}/stop?t=10`);
      await remove(name);
    },

    async start(spec: LaunchSpec): Promise<LaunchHandle> {
      const create = await engine("POST", `/containers/create?name=${encodeURIComponent(containerName(spec.rentalId))}`, createBody(spec, opts.image));
      if (create.status === 404 && messageOf(create).includes("No such image")) {
        throw new Error(`docker image ${opts.image} is not on this machine; run \`docker pull ${opts.image}\` first (the appliance never pulls images by itself)`);
      }
      if (create.status !== 201 || typeof create.body?.Id !== "string") throw engineError("create container", create);
      const containerId: string = create.body.Id;
      try {
        const started = await engine("POST", `${containerPath(containerId)}/start`);
        // 304: already started.
        if (started.status !== 204 && started.status !== 304) throw engineError("start container", started);
        const port = publishedPort(await inspect(containerId));
        if (port === undefined) throw new Error(`docker: container ${containerId} published no host port for ${JUPYTER_PORT}`);
        const log = join(spec.workDir, LOG_FILE);
        if (spec.basePath)
          return { launcher: "docker", url: `http://127.0.0.1:${port}${spec.basePath}lab`, data: { containerId, port, log }, proxy: { upstream: `http://127.0.0.1:${port}`, basePath: spec.basePath } };
        return { launcher: "docker", url: `http://${opts.hostAddress}:${port}/lab`, data: { containerId, port, log } };
      } catch (err) {
        await remove(containerId).catch(() => {});
        throw err;
      }
    },

    async probe(handle: LaunchHandle): Promise<Liveness> {
      // An unreachable daemon throws rather than answering "dead": a daemon restart is no reason to end a rental.
      const info = await inspect(containerIdOf(handle));
      if (info === undefined || info.State?.Running !== true) return "dead";
      // The daemon's port is current; the handle's is what start saw.
      const port = publishedPort(info) ?? handle.data.port;
      try {
        // Jupyter Server answers GET /api with its version and no auth
        // (jupyter_server/services/api/handlers.py, APIVersionHandler).
        // proxy: false, or an http_proxy in the environment would carry the loopback probe away.
        const res = await probeFetch(`http://${probeHost}:${port}${handle.proxy?.basePath ?? "/"}api`, { signal: AbortSignal.timeout(PROBE_TIMEOUT_MS), proxy: false });
        await res.body?.cancel();
        return res.status === 200 ? "ready" : "starting";
      } catch {
        return "starting";
      }
    },

    async stop(handle: LaunchHandle): Promise<void> {
      const id = containerIdOf(handle);
      // t=10: the image's stop signal, then SIGKILL after 10 s, so Jupyter can save its state.
      // Any failure here is left to the forced remove, which kills the container anyway.
      await engine("POST", `${containerPath(id)}/stop?t=10`).catch(() => {});
      // The container's log goes with it: keep a copy in the rental's work dir for the owner.
      if (typeof handle.data.log === "string") {
        const text = await containerLog(id).catch(() => undefined);
        if (text !== undefined) writeFileSync(handle.data.log, text);
      }
      await remove(id);
    },

    async health(): Promise<string | null> {
      let ping: EngineReply;
      try {
        ping = await engine("GET", "/_ping");
      } catch (e) {
        return `the Docker daemon does not answer on ${socketPath} (${(e as Error).message}); is docker running, and may this user use its socket?`;
      }
      if (ping.status !== 200) return `the Docker daemon answered /_ping with HTTP ${ping.status}`;
      const image = await engine("GET", `/images/${encodeURIComponent(opts.image)}/json`);
      if (image.status === 404) return `docker image ${opts.image} is not on this machine; run \`docker pull ${opts.image}\``;
      if (image.status !== 200) return `docker: inspecting image ${opts.image} failed: ${messageOf(image)}`;
      return null;
    },

    async logs(handle: LaunchHandle, maxBytes: number): Promise<string> {
      const text = await containerLog(containerIdOf(handle)).catch(() => undefined);
      if (text !== undefined) return tailBytes(text, maxBytes);
      return typeof handle.data.log === "string" ? tailOf(handle.data.log, maxBytes) : "";
    },
  };

  /** The container's stdout and stderr, or undefined when the daemon knows no such container. */
  async function containerLog(id: string): Promise<string | undefined> {
    const res = await send("GET", `${containerPath(id)}/logs?stdout=true&stderr=true&tail=2000`);
    const bytes = new Uint8Array(await res.arrayBuffer());
    if (res.status === 404) return undefined;
    if (res.status !== 200) throw new Error(`docker: read container log failed: HTTP ${res.status}`);
    return demultiplex(bytes);
  }

  /** The container's inspect JSON, or undefined when the daemon knows no such container. */
  async function inspect(id: string): Promise<any> {
    const res = await engine("GET", `${containerPath(id)}/json`);
    if (res.status === 404) return undefined;
    if (res.status !== 200) throw engineError("inspect container", res);
    return res.body;
  }
}

/**
 * The ContainerConfig of POST /containers/create. The token goes in Env as JUPYTER_TOKEN (read by
 * Jupyter Server), not in Cmd: a container's command line shows in the host's process list. This
 * body is never logged.
 */
function createBody(spec: LaunchSpec, image: string) {
  return {
    Image: image,
    Cmd: [
      "jupyter",
      "lab",
      "--ip=0.0.0.0",
      "--port=8888",
      "--no-browser",
      `--ServerApp.root_dir=${WORK_DIR}`,
      ...proxyFlags(spec.basePath),
    ],
    Env: [`NVIDIA_VISIBLE_DEVICES=${spec.gpus.join(",")}`, `JUPYTER_TOKEN=${spec.token}`],
    Labels: { "appliance.rental": spec.rentalId },
    // Declared as well as bound, as the CLI's `-p` and docker-py do, so an image without
    // `EXPOSE 8888` still gets the mapping.
    ExposedPorts: { [JUPYTER_PORT]: {} },
    HostConfig: {
      // The `--gpus` flag on the wire: the nvidia driver with the given device ids.
      DeviceRequests: [{ Driver: "nvidia", DeviceIDs: spec.gpus, Capabilities: [["gpu"]] }],
      // An empty HostPort lets the daemon pick a free one; inspect reports which.
      // Proxy mode publishes on the host's loopback only: the appliance's port is the one way in.
      PortBindings: { [JUPYTER_PORT]: [{ HostIp: spec.basePath ? "127.0.0.1" : "", HostPort: "" }] },
      Binds: [`${spec.workDir}:${WORK_DIR}`],
    },
  };
}

/**
 * A container without a TTY sends its log as frames: 1 byte stream (1 stdout, 2 stderr), 3 zero
 * bytes, a big-endian uint32 length, then the payload. A stream that does not parse as frames is
 * taken as raw text (a TTY container).
 */
export function demultiplex(bytes: Uint8Array): string {
  const parts: Uint8Array[] = [];
  let at = 0;
  while (at < bytes.length) {
    if (at + 8 > bytes.length || bytes[at]! > 2 || bytes[at + 1] !== 0 || bytes[at + 2] !== 0 || bytes[at + 3] !== 0) return new TextDecoder().decode(bytes);
    const size = new DataView(bytes.buffer, bytes.byteOffset + at + 4, 4).getUint32(0);
    if (at + 8 + size > bytes.length) return new TextDecoder().decode(bytes);
    parts.push(bytes.subarray(at + 8, at + 8 + size));
    at += 8 + size;
  }
  return new TextDecoder().decode(Buffer.concat(parts));
}

function tailBytes(text: string, maxBytes: number): string {
  const buf = Buffer.from(text);
  return buf.length <= maxBytes ? text : buf.subarray(buf.length - maxBytes).toString("utf8");
}

/** The host port the daemon published for Jupyter (IPv4 and IPv6 bindings share it). */
function publishedPort(info: any): number | undefined {
  const port = Number(info?.NetworkSettings?.Ports?.[JUPYTER_PORT]?.[0]?.HostPort);
  return Number.isInteger(port) && port > 0 ? port : undefined;
}

function containerName(rentalId: string): string {
  return `appliance-${rentalId}`;
}

function containerPath(id: string): string {
  return `/containers/${encodeURIComponent(id)}`;
}

function containerIdOf(handle: LaunchHandle): string {
  const id = handle.data.containerId;
  if (typeof id !== "string" || id === "") throw new Error("docker: the rental's handle names no container");
  return id;
}

/** Engine API errors carry `{"message": …}`. */
function messageOf(res: EngineReply): string {
  const body = res.body;
  if (body && typeof body === "object" && typeof body.message === "string") return body.message;
  return typeof body === "string" && body ? body : `HTTP ${res.status}`;
}

function engineError(action: string, res: EngineReply): Error {
  return new Error(`docker: ${action} failed: ${messageOf(res)}`);
}
