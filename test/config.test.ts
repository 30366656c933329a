import { afterAll, describe, expect, test } from "bun:test";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ConfigError, loadConfig, pointerToDotted } from "../src/lib/config";
import { tempDir } from "./helpers/app";

const dir = tempDir();
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const env = { HOME: dir, XDG_CONFIG_HOME: join(dir, "xdg-config"), XDG_DATA_HOME: join(dir, "xdg-data") };

function write(name: string, toml: string): string {
  const p = join(dir, name);
  writeFileSync(p, toml);
  return p;
}

function configError(f: () => unknown): string {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    return (e as Error).message;
  }
  throw new Error("expected a ConfigError");
}

describe("defaults", () => {
  test("work with no file at all", () => {
    const { config, file } = loadConfig({ env });
    expect(file).toBeNull();
    expect(config.server).toMatchObject({ host: "127.0.0.1", port: 8484, data_dir: join(dir, "xdg-data", "appliance") });
    expect(config.limits).toMatchObject({ free_trial_tokens: 250_000, free_rpm: 20, free_images_per_day: 5, free_images_per_minute: 2, premium_images_per_day: 300 });
    expect(config.prices).toMatchObject({ chat_input_per_m: 0.12, chat_output_per_m: 1.7, classifier_input_per_m: 0.05, image_per_image: 0.003, batch_discount: 0.5 });
    expect(config.models).toEqual([]);
  });

  test("the XDG config file is read when present", () => {
    const xdg = join(dir, "xdg2");
    mkdirSync(join(xdg, "appliance"), { recursive: true });
    writeFileSync(join(xdg, "appliance", "config.toml"), "[server]\nport = 9001\n");
    expect(loadConfig({ env: { ...env, XDG_CONFIG_HOME: xdg } }).config.server.port).toBe(9001);
  });
});

describe("sources and precedence", () => {
  const file = write(
    "a.toml",
    `
models_dir = "weights"
[server]
port = 9000
host = "0.0.0.0"
data_dir = "~/appdata"
[prices]
chat_output_per_m = 2.5
[[models]]
id = "small"
name = "Small"
kind = "chat"
files = { model = "small.gguf" }
max_context = 16384
slots = 4
`,
  );

  test("a TOML file sets fields; relative paths resolve against it; ~ is the home dir", () => {
    const { config } = loadConfig({ file, env });
    expect(config.server).toMatchObject({ port: 9000, host: "0.0.0.0", data_dir: join(dir, "appdata") });
    expect(config.prices.chat_output_per_m).toBe(2.5);
    expect(config.prices.chat_input_per_m).toBe(0.12);
    expect(config.models_dir).toBe(join(dir, "weights"));
    expect(config.models[0]).toMatchObject({ id: "small", slots: 4, vision: false });
  });

  test("environment overrides the file and flags override the environment", () => {
    const e = { ...env, APPLIANCE_PORT: "9100", APPLIANCE_DATA_DIR: "/tmp/from-env" };
    expect(loadConfig({ file, env: e }).config.server).toMatchObject({ port: 9100, data_dir: "/tmp/from-env" });
    const flagged = loadConfig({ file, env: e, flags: { port: 9200, dataDir: "/tmp/from-flag", demo: true } }).config;
    expect(flagged.server).toMatchObject({ port: 9200, data_dir: "/tmp/from-flag" });
    expect(flagged.demo).toBe(true);
  });

  test("APPLIANCE_CONFIG names the file when no flag does", () => {
    expect(loadConfig({ env: { ...env, APPLIANCE_CONFIG: file } }).config.server.port).toBe(9000);
  });
});

describe("errors name the bad field", () => {
  test.each([
    ["a port of the wrong type", `[server]\nport = "eighty"`, "server.port: Expected integer"],
    ["a port out of range", `[server]\nport = 70000`, "server.port: Expected integer to be less or equal to 65535"],
    ["a misspelt field", `[server]\nprot = 80`, "server.prot: unknown field"],
    ["an unknown section", `[limts]\nfree_rpm = 3`, "limts: unknown field"],
    ["a bad model kind", `[[models]]\nid="x"\nname="X"\nkind="video"\nfiles={model="x"}\nmax_context=8`, "models[0].kind"],
    ["a model without max_context", `[[models]]\nid="x"\nname="X"\nkind="chat"\nfiles={model="x"}`, "models[0].max_context"],
    ["a negative price", `[prices]\nchat_input_per_m = -1`, "prices.chat_input_per_m"],
    ["a rental node without a price", `[[rental_nodes]]\ngpu="H100"\nvram_mb=80000\ncompute_cap=9.0\ncountry="Germany"\ncountry_code="DE"\nlauncher="local"`, "rental_nodes[0].price_per_hour"],
  ])("%s", (_name, toml, expected) => {
    const file = write(`bad-${Math.random()}.toml`, toml);
    const msg = configError(() => loadConfig({ file, env }));
    expect(msg).toContain(expected);
    expect(msg).toContain(file);
  });

  test("a bad port from the environment is named too", () => {
    expect(configError(() => loadConfig({ env: { ...env, APPLIANCE_PORT: "http" } }))).toContain("server.port");
  });

  test("a TOML syntax error names the file", () => {
    const file = write("syntax.toml", "a = = 1");
    expect(configError(() => loadConfig({ file, env }))).toContain("syntax.toml");
  });

  test("a missing file is an error, not silently the defaults", () => {
    expect(configError(() => loadConfig({ file: join(dir, "none.toml"), env }))).toContain("not found");
  });

  test("a device the model's engine has no backend for is refused naming the field", () => {
    const chat = `[[models]]\nid="a"\nname="A"\nkind="chat"\nfiles={model="a"}\nmax_context=8\ndevice="webgpu"\n`;
    expect(configError(() => loadConfig({ file: write("webgpu-chat.toml", chat), env }))).toContain("models[0].device:");
    const embed = `[[models]]\nid="e"\nname="E"\nkind="embedding"\nfiles={model="e"}\nmax_context=8\ndevice="vulkan"\n`;
    expect(configError(() => loadConfig({ file: write("vulkan-embed.toml", embed), env }))).toContain("models[0].device:");
  });

  test("duplicate model ids and retired ids that are still served are refused", () => {
    const m = `[[models]]\nid="a"\nname="A"\nkind="chat"\nfiles={model="a"}\nmax_context=8\n`;
    expect(configError(() => loadConfig({ file: write("dup.toml", m + m), env }))).toContain('models[1].id: duplicate model id "a"');
    const r = `${m}[[retired_models]]\nid="a"\n`;
    expect(configError(() => loadConfig({ file: write("ret.toml", r), env }))).toContain("retired_models[0].id");
    const r2 = `${m}[[retired_models]]\nid="old"\nreplaced_by="zzz"\n`;
    expect(configError(() => loadConfig({ file: write("ret2.toml", r2), env }))).toContain("retired_models[0].replaced_by");
  });

  test("a GPU declared twice as a rental node is refused when the config is read, naming both entries", () => {
    const node = (uuid: string) =>
      `[[rental_nodes]]\ngpu_uuid="${uuid}"\ngpu="NVIDIA L4"\nvram_mb=23034\ncompute_cap=8.9\ncountry="Germany"\ncountry_code="DE"\nprice_per_hour=0.5\n`;
    const uuid = "GPU-5f1c2b1e-9d4a-4c3e-8f2a-0a1b2c3d4e5f";
    const msg = configError(() => loadConfig({ file: write("gpus.toml", node(uuid) + node(uuid.toUpperCase())), env }));
    expect(msg).toContain("rental_nodes[1].gpu_uuid");
    expect(msg).toContain("rental_nodes[0]");
    expect(msg).toContain("gpus.toml");
  });
});

test("JSON pointers become dotted field names", () => {
  expect(pointerToDotted("/models/0/files/model")).toBe("models[0].files.model");
  expect(pointerToDotted("")).toBe("");
});
