import { describe, expect, test } from "bun:test";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { tempDir } from "../helpers/app";
import { cliBinaries, runAgent, summary } from "./agents";
import pins from "./agents.json";
import { useDemoServer } from "./demo-server";
import { expectAnswered, keepFixture, type RecordingProxy } from "./recording-proxy";

// The other coding agents people point at the appliance — opencode, pi, qwen-code, Continue CLI,
// Kilo CLI, Cline — at the versions pinned in agents.json (installed by test/setup-agents.sh),
// each configured only through its own documented files, flags or environment in a temp HOME
// (the settings web/docs/clients.md gives), one headless turn against `serve --demo` through a
// recording proxy: exit 0, at least one inference request in the wire format chosen, every request
// answered 2xx. Output tokens are capped through each client's own setting, so a random-weights
// answer ends in seconds.

const bins = cliBinaries();
let key: string;
let proxy: RecordingProxy;
useDemoServer((s) => ({ key, proxy } = s));

type Wire = "chat" | "responses" | "messages";
const PATHS: Record<Wire, string> = { chat: "/v1/chat/completions", responses: "/v1/responses", messages: "/v1/messages" };

interface Client {
  name: string;
  version: string;
  wires: Wire[];
  /** Its turn is configured without tools: the requests must carry none. */
  noTools?: boolean;
  /** Writes the client's config into `home` and says how to run one turn. */
  setup(home: string, wire: Wire, url: string): { cmd: string[]; env?: Record<string, string> } | Promise<{ cmd: string[]; env?: Record<string, string> }>;
}

/** opencode's and Kilo's provider block (they share opencode's config format). */
const opencodeProvider = (url: string) => ({
  provider: {
    appliance: {
      npm: "@ai-sdk/openai-compatible",
      name: "Appliance",
      options: { baseURL: `${url}/v1`, apiKey: "{env:APPLIANCE_API_KEY}" },
      models: { "demo-chat": { name: "Demo chat", limit: { context: 65536, output: 512 } } },
    },
  },
  model: "appliance/demo-chat",
  autoupdate: false,
  share: "disabled",
});

const write = (path: string, text: string) => {
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, text);
};

const CLIENTS: Client[] = [
  {
    name: "opencode",
    version: pins["opencode-ai"],
    wires: ["chat"],
    setup(home, _wire, url) {
      write(join(home, ".config/opencode/opencode.json"), JSON.stringify(opencodeProvider(url)));
      return { cmd: [bins.opencode, "run", "say hi", "-m", "appliance/demo-chat"] };
    },
  },
  {
    name: "Kilo CLI",
    version: pins["@kilocode/cli"],
    wires: ["chat"],
    noTools: true,
    setup(_home, _wire, url) {
      // Kilo's tools are off for this turn ("tools": {"*": false}, opencode's format): a headless run
      // ends with exit 1 when a tool fails three times alike (its doom-loop guard asks, and headless
      // means no), and a random-weights model calls Kilo's tools with schema-valid arguments its
      // tools then refuse ({"mode":"search"} without the query search needs: CI, 2026-11-29). The
      // same request format with tools is opencode's turn above; Kilo's adds no wire of its own.
      return { cmd: [bins.kilo, "run", "say hi", "-m", "appliance/demo-chat"], env: { KILO_CONFIG_CONTENT: JSON.stringify({ ...opencodeProvider(url), tools: { "*": false } }) } };
    },
  },
  {
    name: "pi",
    version: pins["@mariozechner/pi-coding-agent"],
    wires: ["chat", "responses", "messages"],
    setup(home, wire, url) {
      const api = { chat: "openai-completions", responses: "openai-responses", messages: "anthropic-messages" }[wire];
      const baseUrl = wire === "messages" ? url : `${url}/v1`;
      write(join(home, ".pi/agent/models.json"), JSON.stringify({ providers: { appliance: { baseUrl, api, apiKey: "APPLIANCE_API_KEY", models: [{ id: "demo-chat", contextWindow: 65536, maxTokens: 512 }] } } }));
      return { cmd: [bins.pi, "-p", "--provider", "appliance", "--model", "demo-chat", "--no-session", "say hi"] };
    },
  },
  {
    name: "qwen-code",
    version: pins["@qwen-code/qwen-code"],
    wires: ["chat", "responses", "messages"],
    setup(_home, wire, url) {
      const auth = { chat: "openai", responses: "openai-responses", messages: "anthropic" }[wire];
      // Three turns: the random demo model sometimes answers with a tool call, and qwen-code sends
      // its result back for a second turn (with one turn allowed it then exits 53, "max session
      // turns", though every request was answered: seen once in the full runs of 2026-11-28).
      const cmd = [bins.qwen, "-p", "say hi", "--auth-type", auth, "-m", "demo-chat", "--max-session-turns", "3", "--approval-mode", "plan"];
      // qwen-code asks for the model's whole output limit (32,000) unless told otherwise.
      const env: Record<string, string> = { QWEN_CODE_MAX_OUTPUT_TOKENS: "128" };
      if (wire === "messages") Object.assign(env, { ANTHROPIC_API_KEY: key, ANTHROPIC_BASE_URL: url, ANTHROPIC_MODEL: "demo-chat" });
      else cmd.push("--openai-api-key", key, "--openai-base-url", `${url}/v1`);
      return { cmd, env };
    },
  },
  {
    name: "Continue CLI",
    version: pins["@continuedev/cli"],
    wires: ["chat", "messages"],
    setup(home, wire, url) {
      const [provider, apiBase] = wire === "messages" ? ["anthropic", `${url}/v1/`] : ["openai", `${url}/v1`];
      const config = join(home, "config.yaml");
      write(config, ["name: appliance", "version: 0.0.1", "schema: v1", "models:", "  - name: Demo chat", `    provider: ${provider}`, "    model: demo-chat", `    apiBase: ${apiBase}`, `    apiKey: ${key}`, "    roles: [chat, edit, apply]", "    defaultCompletionOptions:", "      contextLength: 65536", "      maxTokens: 512", ""].join("\n"));
      return { cmd: [bins.cn, "-p", "say hi", "--config", config], env: { CONTINUE_GLOBAL_DIR: join(home, ".continue") } };
    },
  },
  {
    name: "Cline",
    version: pins.cline,
    wires: ["chat"],
    async setup(home, _wire, url) {
      const data = join(home, ".cline");
      const auth = await runAgent([bins.cline, "auth", "-p", "openai", "-k", key, "-m", "demo-chat", "-b", `${url}/v1`, "--data-dir", data], { HOME: home }, home);
      expect({ code: auth.code, out: auth.stderr.slice(-500) }).toMatchObject({ code: 0 });
      return { cmd: [bins.cline, "say hi", "--data-dir", data, "--json", "-t", "90", "--retries", "1"] };
    },
  },
];

describe.each(CLIENTS)("$name", (client) => {
  test.each(client.wires)(`${client.name} ${client.version}: one headless turn over %s, exit 0, every request answered 2xx`, async (wire) => {
    const home = tempDir("appliance-cli-");
    mkdirSync(join(home, "work"));
    try {
      const { cmd, env } = await client.setup(home, wire, proxy.url);
      const { result, sent } = await proxy.recording(() => runAgent(cmd, { HOME: home, APPLIANCE_API_KEY: key, ...env }, join(home, "work"), 120_000));
      expect({ code: result.code, stderr: result.stderr.slice(-2000), sent: summary(sent) }).toMatchObject({ code: 0 });
      const turns = sent.filter((r) => r.path === PATHS[wire]);
      expect({ wire, sent: summary(sent) }).toMatchObject({ wire });
      expect(turns.length).toBeGreaterThan(0);
      if (client.noTools) expect(turns.map((t) => (t.body as { tools?: unknown[] }).tools?.length ?? 0)).toEqual(turns.map(() => 0));
      expectAnswered(sent);
      keepFixture(`${wire}-${client.name.toLowerCase().replace(/[^a-z]+/g, "-")}-recorded.json`, turns[0]!);
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  }, 180_000);
});
