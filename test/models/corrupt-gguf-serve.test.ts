import { afterAll, beforeAll, expect, test } from "bun:test";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { ensureChatModel } from "../../models/cache";
import { tempDir } from "../helpers/app";
import { CLI, serveCli } from "../helpers/cli";
import { attackGguf } from "./gguf-bytes";

// The outside attack's file (issue 41 M2) through a real `appliance serve`: 24 bytes claiming 2^63
// key-value pairs, named by a first_use model beside a working one. Before the header check, the
// first request for it never answered and the server's memory grew by gigabytes (node-llama-cpp's
// reader looped on the count); `ps` said "loading" for good. Now: the server starts and logs the
// file once, the model is listed as failed with the reason, its requests get 503 model_load_failed
// at once, the other model serves, and the server's memory does not move.

const dir = tempDir("appliance-corrupt-gguf-");
const attack = join(dir, "attack.gguf");
let config: string;
let server: Awaited<ReturnType<typeof serveCli>> | null = null;
let logs = "";

beforeAll(async () => {
  writeFileSync(attack, attackGguf());
  const small = await ensureChatModel("small-chat");
  config = join(dir, "config.toml");
  writeFileSync(
    config,
    `[server]\nlog_level = "info"\n[engines]\ndevice = "cpu"\nthreads = 1\n[rentals]\ndiscover = false\n` +
      `[[models]]\nid = "small-chat"\nname = "small"\nkind = "chat"\nfiles = { model = "${small}" }\nmax_context = 1024\nslots = 1\nload = "start"\n` +
      `[[models]]\nid = "attack"\nname = "attack"\nkind = "chat"\nfiles = { model = "${attack}" }\nmax_context = 1024\nslots = 1\nload = "first_use"\n`,
  );
  server = await serveCli(dir, ["--port", "0"], { APPLIANCE_CONFIG: config });
  void (async () => {
    for await (const chunk of server!.child.stdout as ReadableStream<Uint8Array>) logs += new TextDecoder().decode(chunk);
  })();
  void (async () => {
    for await (const _ of server!.child.stderr as ReadableStream<Uint8Array>);
  })();
}, 150_000);

afterAll(() => {
  server?.child.kill("SIGKILL");
  rmSync(dir, { recursive: true, force: true });
});

/** The server process's resident memory in MiB, from /proc/<pid>/status. */
function rssMb(): number {
  const line = readFileSync(`/proc/${server!.child.pid}/status`, "utf8").split("\n").find((l) => l.startsWith("VmRSS:"))!;
  return Number(/(\d+)/.exec(line)![1]) / 1024;
}

async function ps(args: string[]) {
  const child = Bun.spawn([process.execPath, CLI, "ps", ...args], {
    env: { PATH: process.env.PATH ?? "", HOME: dir, XDG_CONFIG_HOME: join(dir, "no-config"), APPLIANCE_DATA_DIR: dir, APPLIANCE_CONFIG: config },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  return { code, stdout, stderr };
}

const REASON = "not a valid GGUF file (too_many_kvs): kv_count at byte 16: 9223372036854775808 key-value pairs: the 0 bytes after the header hold at most 0";

test("the server starts with the attack file configured: logged once with its path, listed as failed with the reason", async () => {
  for (let i = 0; i < 50 && !logs.includes("not a valid GGUF"); i++) await Bun.sleep(100); // stdout is flushed every 100 ms
  const lines = logs.split("\n").filter((l) => l.includes('"model cannot load: its file is not a valid GGUF')).map((l) => JSON.parse(l));
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatchObject({ level: "error", model: "attack", field: "models[1].files.model", error: `${attack}: ${REASON} (14 bytes each at least; limit 65536)` });

  const listed = await ps(["--json"]);
  expect(listed.code).toBe(0);
  const models = JSON.parse(listed.stdout) as { id: string; state: string; error: string | null }[];
  expect(models.find((m) => m.id === "small-chat")).toMatchObject({ state: "loaded", error: null });
  const bad = models.find((m) => m.id === "attack")!;
  expect(bad.state).toBe("failed");
  expect(bad.error).toStartWith(`model "attack" cannot be loaded: its model file is ${REASON}`);
  expect((await ps([])).stdout.split("\n").find((l) => l.startsWith("attack "))).toMatch(/^attack\s+chat\s+failed\s/);
}, 30_000);

test("requests for it get 503 model_load_failed at once, the other model serves, and the server's memory stays where it was", async () => {
  const before = rssMb();
  const openai = new OpenAI({ apiKey: server!.key!, baseURL: `${server!.url}/v1`, maxRetries: 0, timeout: 20_000 });
  for (let i = 0; i < 3; i++) {
    const err = await openai.chat.completions.create({ model: "attack", messages: [{ role: "user", content: "hi" }], max_tokens: 2 }).catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect(err.status).toBe(503);
    expect(err.code).toBe("model_load_failed");
    expect(err.error.message).toStartWith(`model "attack" cannot be loaded: its model file is ${REASON}`);
    expect(err.error.message).not.toContain(dir); // no server path to clients
  }
  const ok = await openai.chat.completions.create({ model: "small-chat", messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
  expect(ok.choices[0]!.message.role).toBe("assistant");

  const load = await ps(["load", "attack"]);
  expect(load.code).toBe(1);
  expect(load.stderr).toStartWith(`error: model "attack" cannot be loaded: its model file is ${REASON}`);

  const after = rssMb();
  // The unguarded reader grew by gigabytes within seconds; a chat request on the tiny model costs a few MB.
  expect(after - before).toBeLessThan(150);
  expect(after).toBeLessThan(1024);
}, 60_000);
