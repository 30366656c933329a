import { describe, expect, test } from "bun:test";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "../helpers/app";
import { agentBinaries, claudeCodeEnv, runAgent, summary } from "./agents";
import { useDemoServer } from "./demo-server";
import { expectAnswered, keepFixture, type RecordingProxy } from "./recording-proxy";

// The coding agents people point at the appliance, their real binaries at the versions pinned in
// agents.json (installed by test/setup-agents.sh), against `serve --demo` over HTTP with the
// settings web/docs/clients.md gives. A recording proxy in front of the server keeps every request they
// send: each must be answered 2xx, and with APPLIANCE_RECORD_FIXTURES=1 the first of each is
// written to test/fixtures/requests/ for the translation tests.

const bins = agentBinaries();
let key: string;
let proxy: RecordingProxy;
useDemoServer((s) => ({ key, proxy } = s));

describe("Claude Code", () => {
  test(`claude -p (${bins.pins["@anthropic-ai/claude-code"]}) finishes a turn with exit 0, every request it sends answered 2xx`, async () => {
    const home = tempDir("appliance-claude-");
    mkdirSync(join(home, "work"));
    try {
      const version = await runAgent([bins.claude, "--version"], { HOME: home }, home);
      expect(version.stdout).toContain(bins.pins["@anthropic-ai/claude-code"]);
      const { result, sent } = await proxy.recording(() =>
        runAgent(
          [bins.claude, "-p", "say hi", "--model", "demo-chat"],
          claudeCodeEnv(proxy.url, key, home),
          join(home, "work"),
        ),
      );
      expect({ code: result.code, stderr: result.stderr.slice(-2000), sent: summary(sent) }).toMatchObject({ code: 0 });
      const turns = sent.filter((r) => r.path.startsWith("/v1/messages"));
      expect(turns.length).toBeGreaterThan(0);
      expectAnswered(sent);
      // What makes this Claude Code's request and not a simple one: its tools, adaptive thinking, a long prompt.
      const first = turns[0]!.body as { tools: unknown[]; thinking: { type: string }; max_tokens: number; stream: boolean; system: unknown[] };
      expect(first.tools.length).toBeGreaterThan(5);
      expect(first.thinking.type).toBe("adaptive");
      expect(first.max_tokens).toBe(1024);
      expect(first.stream).toBe(true);
      expect(JSON.stringify(first).length).toBeGreaterThan(20_000);
      keepFixture("messages-claude-code-recorded.json", turns[0]!);
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  }, 300_000);
});

describe("Codex CLI", () => {
  test(`codex exec (${bins.pins["@openai/codex"]}) finishes a turn with exit 0, every request it sends answered 2xx`, async () => {
    const home = tempDir("appliance-codex-");
    const codexHome = join(home, ".codex");
    mkdirSync(codexHome);
    mkdirSync(join(home, "work"));
    // The docs' config.toml (web/docs/clients.md), as a user writes it: web search off, since the
    // contract refuses hosted tools (spec §7) and this server runs with its defaults.
    writeFileSync(
      join(codexHome, "config.toml"),
      [
        'model = "demo-chat"',
        'model_provider = "appliance"',
        'web_search = "disabled"',
        "",
        "[model_providers.appliance]",
        'name = "Appliance"',
        `base_url = "${proxy.url}/v1"`,
        'env_key = "APPLIANCE_API_KEY"',
        'wire_api = "responses"',
        "",
      ].join("\n"),
    );
    try {
      const version = await runAgent([bins.codex, "--version"], { HOME: home }, home);
      expect(version.stdout).toContain(bins.pins["@openai/codex"]);
      const { result, sent } = await proxy.recording(() =>
        runAgent([bins.codex, "exec", "--skip-git-repo-check", "say hi"], { HOME: home, CODEX_HOME: codexHome, APPLIANCE_API_KEY: key }, join(home, "work")),
      );
      expect({ code: result.code, stderr: result.stderr.slice(-2000), sent: summary(sent) }).toMatchObject({ code: 0 });
      const turns = sent.filter((r) => r.path === "/v1/responses");
      expect(turns.length).toBeGreaterThan(0);
      expectAnswered(sent);
      // What Codex sends: the thought back encrypted, a namespace group, and with the setting no web_search tool.
      const first = turns[0]!.body as { include: string[]; store: boolean; stream: boolean; tools: { type: string }[]; reasoning: { summary: string } };
      expect(first.include).toContain("reasoning.encrypted_content");
      expect(first.store).toBe(false);
      expect(first.stream).toBe(true);
      expect(first.tools.map((t) => t.type)).toEqual(expect.arrayContaining(["function", "namespace"]));
      expect(first.tools.map((t) => t.type)).not.toContain("web_search");
      keepFixture("responses-codex-settings-recorded.json", turns[0]!);
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  }, 300_000);
});
