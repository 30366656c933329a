import { afterEach, expect, test } from "bun:test";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ensureChatModel } from "../models/cache";
import { tempDir } from "./helpers/app";
import { serveCli } from "./helpers/cli";

// `serve --demo` and SIGHUP (issue 41 L3): a reload computes the served models as the start does —
// the file's models, then each demo model whose id the file does not use. A config block that
// overrides a demo model, once removed, gives the demo model back; a model of the file whose id
// merely starts with "demo-" is not kept once removed.

const dirs: string[] = [];
const children: ReturnType<typeof Bun.spawn>[] = [];
afterEach(() => {
  for (const c of children.splice(0)) c.kill("SIGKILL");
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

test("with --demo, removing the block that overrode a demo model and sending SIGHUP serves the demo model again; a removed demo-named model of the file goes", async () => {
  const dir = tempDir("appliance-hup-demo-");
  dirs.push(dir);
  const small = await ensureChatModel("small-chat");
  const config = join(dir, "config.toml");
  const head = `[server]\nlog_level = "info"\n[engines]\ndevice = "cpu"\nthreads = 1\n[rentals]\ndiscover = false\n`;
  const block = (id: string, name: string) =>
    `[[models]]\nid = "${id}"\nname = "${name}"\nkind = "chat"\nfiles = { model = "${small}" }\nmax_context = 1024\nslots = 1\nload = "first_use"\n`;
  writeFileSync(config, head + block("demo-small-chat", "Operator's own small chat") + block("demo-mine", "Mine, named like a demo"));
  const { child, url, key } = await serveCli(dir, ["--port", "0", "--demo"], { APPLIANCE_CONFIG: config });
  children.push(child);
  const logs: string[] = [];
  void (async () => {
    for await (const chunk of child.stdout as ReadableStream<Uint8Array>) logs.push(new TextDecoder().decode(chunk));
  })();
  // The Anthropic listing names each model and its window.
  const models = async () =>
    Object.fromEntries(
      (((await (await fetch(`${url}/v1/models`, { headers: { "x-api-key": key!, "anthropic-version": "2023-06-01" } })).json()) as any).data as { id: string; display_name: string; max_input_tokens: number }[]).map(
        (m) => [m.id, { name: m.display_name, context: m.max_input_tokens }],
      ),
    );
  const reloads = () => logs.join("").split('"msg":"config reloaded"').length - 1;
  const hup = async () => {
    const before = reloads();
    child.kill("SIGHUP");
    for (let i = 0; i < 250 && reloads() === before; i++) await Bun.sleep(20);
    expect(reloads()).toBe(before + 1);
  };

  const atStart = await models();
  expect(atStart["demo-small-chat"]).toEqual({ name: "Operator's own small chat", context: 1024 });
  expect(atStart["demo-mine"]).toEqual({ name: "Mine, named like a demo", context: 1024 });
  const demoChat = atStart["demo-chat"];
  expect(demoChat?.context).toBe(65536);

  writeFileSync(config, head);
  await hup();
  const after = await models();
  expect(after["demo-small-chat"]).toEqual({ name: "Demo small chat (tiny random qwen3, 16k context)", context: 16384 });
  expect(after["demo-mine"]).toBeUndefined();
  expect(after["demo-chat"]).toEqual(demoChat!);
  expect(Object.keys(after).sort()).toEqual(Object.keys(atStart).filter((id) => id !== "demo-mine").sort());

  // And back: the block overrides the demo model again.
  writeFileSync(config, head + block("demo-small-chat", "Operator's own small chat"));
  await hup();
  expect((await models())["demo-small-chat"]).toEqual({ name: "Operator's own small chat", context: 1024 });
}, 180_000);
