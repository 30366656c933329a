// The Docker launcher against a stand-in Engine API: a real HTTP server on a unix socket that
// replays a recorded Docker Engine API v1.43 exchange (test/fixtures/docker/engine-api.json) and
// keeps every request it received, so the tests see the exact bodies the launcher sent.
import { afterEach, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import recorded from "../fixtures/docker/engine-api.json";
import { createDockerLauncher, demultiplex } from "../../src/2-services/rentals/launchers/docker";
import type { LaunchHandle } from "../../src/2-services/rentals/launchers/types";

interface Exchange {
  method: string;
  path: string;
  status: number;
  body?: any;
  /** A binary answer (the log stream), base64, with its content type. */
  rawBase64?: string;
  contentType?: string;
}
interface Received {
  method: string;
  path: string;
  body: unknown;
}

const exchanges = recorded as Exchange[];
const IMAGE = "quay.io/jupyter/pytorch-notebook:cuda12-python-3.11";
const GPU = "GPU-5f9a3c1e-8b2d-4e7f-a1c3-9d8e7f6a5b4c";
const TOKEN = "tok-7Qm2xVb9";
const RUNNING = "715d80f88d6930c29fa349cac186aea39a6d88fdef31475274577a02ab4f3780";
const FAILS_TO_START = "a6729388b88a456265bc0bc474fde03207a782a1a9082e50bad161c62ce13944";

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
});

/** The stand-in daemon: answers each request with the first unused recorded exchange for its method and path. */
function startEngine(answers: Exchange[]) {
  const dir = mkdtempSync(join(tmpdir(), "docker-engine-"));
  const socketPath = join(dir, "docker.sock");
  const unused = [...answers];
  const received: Received[] = [];
  const server = Bun.serve({
    unix: socketPath,
    async fetch(req) {
      const url = new URL(req.url);
      const path = url.pathname + url.search;
      const text = await req.text();
      received.push({ method: req.method, path, body: text ? JSON.parse(text) : undefined });
      const i = unused.findIndex((e) => e.method === req.method && e.path === path);
      if (i < 0) return Response.json({ message: `stand-in: nothing recorded for ${req.method} ${path}` }, { status: 500 });
      const [answer] = unused.splice(i, 1);
      const headers = { "api-version": "1.43", server: "Docker/24.0.7 (linux)" };
      if (answer!.rawBase64 !== undefined)
        return new Response(Buffer.from(answer!.rawBase64, "base64"), { status: answer!.status, headers: { ...headers, "content-type": answer!.contentType ?? "application/octet-stream" } });
      // The daemon sends 204 and 304 without a body.
      if (answer!.body === null) return new Response(null, { status: answer!.status, headers });
      return Response.json(answer!.body, { status: answer!.status, headers });
    },
  });
  cleanups.push(() => {
    server.stop(true);
    rmSync(dir, { recursive: true, force: true });
  });
  return { socketPath, received, unused };
}

function launcherFor(socketPath: string, probeFetch?: typeof fetch) {
  return createDockerLauncher({ socketPath, image: IMAGE, hostAddress: "gpu-box.lan", probeFetch });
}

function spec(rentalId: string) {
  return { rentalId, gpus: [GPU], token: TOKEN, workDir: `/var/lib/appliance/rentals/${rentalId}` };
}

function recordedFor(rentalIdOrContainer: string): Exchange[] {
  return exchanges.filter((e) => e.path.includes(rentalIdOrContainer));
}

function handleOf(containerId: string, port = 49153): LaunchHandle {
  return { launcher: "docker", url: `http://gpu-box.lan:${port}/lab`, data: { containerId, port } };
}

/** What a probe sees when nothing listens on the published port yet. */
const refused = (async () => {
  throw new TypeError("ECONNREFUSED: Unable to connect");
}) as unknown as typeof fetch;

test("start creates the container with the rental's GPU, token, label, work dir and a free host port", async () => {
  const engine = startEngine(exchanges);
  const handle = await launcherFor(engine.socketPath).start(spec("rent_01"));

  expect(handle).toEqual({
    launcher: "docker",
    url: "http://gpu-box.lan:49153/lab",
    data: { containerId: RUNNING, port: 49153, log: "/var/lib/appliance/rentals/rent_01/jupyter.log" },
  });
  expect(engine.received.map((r) => `${r.method} ${r.path}`)).toEqual([
    "POST /v1.43/containers/create?name=appliance-rent_01",
    `POST /v1.43/containers/${RUNNING}/start`,
    `GET /v1.43/containers/${RUNNING}/json`,
  ]);
  expect(engine.received[0]!.body).toEqual({
    Image: IMAGE,
    Cmd: [
      "jupyter",
      "lab",
      "--ip=0.0.0.0",
      "--port=8888",
      "--no-browser",
      "--ServerApp.root_dir=/home/jovyan/work",
    ],
    // The token in the environment, where Jupyter Server reads it: a container's command line shows
    // in the host's process list.
    Env: [`NVIDIA_VISIBLE_DEVICES=${GPU}`, `JUPYTER_TOKEN=${TOKEN}`],
    Labels: { "appliance.rental": "rent_01" },
    ExposedPorts: { "8888/tcp": {} },
    HostConfig: {
      DeviceRequests: [{ Driver: "nvidia", DeviceIDs: [GPU], Capabilities: [["gpu"]] }],
      PortBindings: { "8888/tcp": [{ HostIp: "", HostPort: "" }] },
      Binds: ["/var/lib/appliance/rentals/rent_01:/home/jovyan/work"],
    },
  });
  expect(engine.received[1]!.body).toBeUndefined();
});

test("a whole rental replays the recorded exchange in order, from create to a second stop; its log outlives the container", async () => {
  // The owner reads the log once more after the container is gone: the daemon says 404 again.
  const logGone = recordedFor(RUNNING).find((e) => e.path.includes("/logs?") && e.status === 404)!;
  const replay = [...recordedFor("rent_01"), ...recordedFor(RUNNING), logGone];
  const engine = startEngine(replay);
  const launcher = launcherFor(engine.socketPath, refused);
  const workDir = mkdtempSync(join(tmpdir(), "docker-rental-"));
  cleanups.push(() => rmSync(workDir, { recursive: true, force: true }));

  // The handle is stored as JSON with the rental; a restarted server probes and stops from that.
  const handle = JSON.parse(JSON.stringify(await launcher.start({ ...spec("rent_01"), workDir }))) as LaunchHandle;
  expect(await launcher.probe(handle)).toBe("starting");
  await launcher.stop(handle);
  // Saved from the container's multiplexed stream before it was removed: stderr and stdout frames in order.
  const saved = readFileSync(join(workDir, "jupyter.log"), "utf8");
  expect(saved).toContain("Jupyter Server 2.14.2 is running at:\n");
  expect(saved).toEndWith("Using GPU: NVIDIA GeForce RTX 4090\n");
  expect(saved).not.toContain("\u0000");
  expect(await launcher.probe(handle)).toBe("dead");
  await launcher.stop(handle);
  expect(readFileSync(join(workDir, "jupyter.log"), "utf8")).toBe(saved); // the second stop kept it
  expect(await launcher.logs(handle, 35)).toBe("Using GPU: NVIDIA GeForce RTX 4090\n");

  expect(engine.received.map((r) => `${r.method} ${r.path}`)).toEqual(replay.map((e) => `${e.method} ${e.path}`));
  expect(engine.unused).toEqual([]);
});

test("probe says ready once Jupyter answers /api on the published port", async () => {
  const jupyter = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    fetch: (req) => (new URL(req.url).pathname === "/api" ? Response.json({ version: "2.14.2" }) : new Response("", { status: 404 })),
  });
  cleanups.push(() => jupyter.stop(true));
  const running = recordedFor(RUNNING).find((e) => e.method === "GET" && e.status === 200)!;
  const ports = { "8888/tcp": [{ HostIp: "0.0.0.0", HostPort: String(jupyter.port) }, { HostIp: "::", HostPort: String(jupyter.port) }] };
  const inspect = { ...running.body, NetworkSettings: { ...running.body.NetworkSettings, Ports: ports } };
  const engine = startEngine([{ ...running, body: inspect }]);

  expect(await launcherFor(engine.socketPath).probe(handleOf(RUNNING, jupyter.port!))).toBe("ready");
});

test("probe says starting while the container runs but Jupyter does not answer yet", async () => {
  const engine = startEngine(recordedFor(RUNNING));
  expect(await launcherFor(engine.socketPath, refused).probe(handleOf(RUNNING))).toBe("starting");
});

test("probe finds a container that exited dead", async () => {
  const running = recordedFor(RUNNING).find((e) => e.method === "GET" && e.status === 200)!;
  const exited = { ...running.body, State: { ...running.body.State, Status: "exited", Running: false, Pid: 0, ExitCode: 1 } };
  const engine = startEngine([{ ...running, body: exited }]);
  expect(await launcherFor(engine.socketPath, refused).probe(handleOf(RUNNING))).toBe("dead");
});

test("probe finds a container the daemon no longer knows dead", async () => {
  const gone = recordedFor(RUNNING).filter((e) => e.status === 404);
  const engine = startEngine(gone);
  expect(await launcherFor(engine.socketPath, refused).probe(handleOf(RUNNING))).toBe("dead");
  expect(engine.received).toEqual([{ method: "GET", path: `/v1.43/containers/${RUNNING}/json`, body: undefined }]);
});

test("stop on a container that is already gone does not throw", async () => {
  const gone = recordedFor(RUNNING).filter((e) => e.status === 404);
  const engine = startEngine(gone);
  await launcherFor(engine.socketPath).stop(handleOf(RUNNING));
  expect(engine.received.map((r) => `${r.method} ${r.path}`)).toEqual([
    `POST /v1.43/containers/${RUNNING}/stop?t=10`,
    `DELETE /v1.43/containers/${RUNNING}?force=true`,
  ]);
});

test("reclaim finds by name the container of a launch whose handle was never recorded, and stops and removes it", async () => {
  const l = launcherFor(startEngine([]).socketPath);
  const intent = JSON.parse(JSON.stringify(l.intent(spec("rent_04"))));
  expect(intent).toEqual({ launcher: "docker", data: { container: "appliance-rent_04" } });
  const engine = startEngine([
    { method: "POST", path: "/v1.43/containers/appliance-rent_04/stop?t=10", status: 204, body: null },
    { method: "DELETE", path: "/v1.43/containers/appliance-rent_04?force=true", status: 204, body: null },
  ]);
  await launcherFor(engine.socketPath).reclaim(intent);
  expect(engine.unused).toEqual([]);
});

test("reclaim of a launch that created nothing is done; with the daemon unreachable it throws, so the rental keeps its GPU", async () => {
  const intent = { launcher: "docker", data: { container: "appliance-rent_05" } };
  const engine = startEngine([
    { method: "POST", path: "/v1.43/containers/appliance-rent_05/stop?t=10", status: 404, body: { message: "No such container: appliance-rent_05" } },
    { method: "DELETE", path: "/v1.43/containers/appliance-rent_05?force=true", status: 404, body: { message: "No such container: appliance-rent_05" } },
  ]);
  await launcherFor(engine.socketPath).reclaim(intent);
  expect(engine.unused).toEqual([]);
  const empty = mkdtempSync(join(tmpdir(), "docker-none-"));
  cleanups.push(() => rmSync(empty, { recursive: true, force: true }));
  await expect(launcherFor(join(empty, "docker.sock")).reclaim(intent)).rejects.toThrow();
});

test("the log stream is demultiplexed; a TTY container's raw text passes through", () => {
  const frame = (stream: number, text: string) => {
    const payload = Buffer.from(text);
    const head = Buffer.alloc(8);
    head[0] = stream;
    head.writeUInt32BE(payload.length, 4);
    return Buffer.concat([head, payload]);
  };
  expect(demultiplex(Buffer.concat([frame(1, "out é\n"), frame(2, "err\n"), frame(1, "")]))).toBe("out é\nerr\n");
  expect(demultiplex(Buffer.from("plain tty output\n"))).toBe("plain tty output\n");
  expect(demultiplex(frame(1, "cut short").subarray(0, 12))).toHaveLength(12); // a torn frame is shown raw, not dropped
});

test("a missing image fails naming the image and docker pull, and nothing is pulled", async () => {
  const engine = startEngine(exchanges);
  const failure = launcherFor(engine.socketPath).start(spec("rent_02"));
  await expect(failure).rejects.toThrow(IMAGE);
  await expect(failure).rejects.toThrow(`docker pull ${IMAGE}`);
  expect(engine.received.map((r) => `${r.method} ${r.path}`)).toEqual(["POST /v1.43/containers/create?name=appliance-rent_02"]);
});

test("a start that fails after create removes the container and reports the daemon's message", async () => {
  const engine = startEngine(exchanges);
  const failure = launcherFor(engine.socketPath).start(spec("rent_03"));
  await expect(failure).rejects.toThrow('could not select device driver "nvidia" with capabilities: [[gpu]]');
  expect(engine.received.map((r) => `${r.method} ${r.path}`)).toEqual([
    "POST /v1.43/containers/create?name=appliance-rent_03",
    `POST /v1.43/containers/${FAILS_TO_START}/start`,
    `DELETE /v1.43/containers/${FAILS_TO_START}?force=true`,
  ]);
});

test("health: the daemon answers /_ping and has the image → healthy; a missing image or daemon is named with its fix", async () => {
  const ping = { method: "GET", path: "/v1.43/_ping", status: 200, rawBase64: Buffer.from("OK").toString("base64"), contentType: "text/plain; charset=utf-8" };
  const imagePath = `/v1.43/images/${encodeURIComponent(IMAGE)}/json`;
  const present = { method: "GET", path: imagePath, status: 200, body: { Id: "sha256:3b1e4c0a7f2d9e8b6a5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a", RepoTags: [IMAGE] } };
  const absent = { method: "GET", path: imagePath, status: 404, body: { message: `No such image: ${IMAGE}` } };

  const ok = startEngine([ping, present]);
  expect(await launcherFor(ok.socketPath).health()).toBeNull();
  expect(ok.received.map((r) => `${r.method} ${r.path}`)).toEqual([`GET /v1.43/_ping`, `GET ${imagePath}`]);

  const noImage = startEngine([ping, absent]);
  expect(await launcherFor(noImage.socketPath).health()).toContain(`docker pull ${IMAGE}`);

  const nowhere = join(mkdtempSync(join(tmpdir(), "docker-none-")), "docker.sock");
  expect(await launcherFor(nowhere).health()).toContain(`does not answer on ${nowhere}`);
});
