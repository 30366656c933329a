import { expect, test } from "bun:test";
import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { query } from "@anthropic-ai/claude-agent-sdk";
import { tempDir } from "../helpers/app";
import { useDemoServer } from "./demo-server";
import { expectAnswered, type RecordingProxy } from "./recording-proxy";

// The Claude Agent SDK (@anthropic-ai/claude-agent-sdk 0.3.332, unmodified; it runs the Claude
// Code binary of its own platform package) with `query` against `serve --demo`, configured only
// through the environment it gives the agent, as its docs say for another base URL.

let key: string;
let proxy: RecordingProxy;
useDemoServer((s) => ({ key, proxy } = s));

test("query() runs a turn to its result message, every request it sends answered 2xx", async () => {
  const home = tempDir("appliance-agent-sdk-");
  mkdirSync(join(home, "work"));
  try {
    const { result: messages, sent } = await proxy.recording(async () => {
      const seen: { type: string; subtype?: string }[] = [];
      const run = query({
        prompt: "say hi",
        options: {
          model: "demo-chat",
          cwd: join(home, "work"),
          maxTurns: 2,
          // Headless: a tool call that is not pre-approved is refused, never asked about.
          permissionMode: "dontAsk",
          allowedTools: [],
          env: {
            PATH: process.env.PATH ?? "/usr/bin:/bin",
            HOME: home,
            CLAUDE_CONFIG_DIR: join(home, ".claude"),
            ANTHROPIC_BASE_URL: proxy.url,
            ANTHROPIC_API_KEY: key,
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
            DISABLE_TELEMETRY: "1",
            // The docs' settings (web/docs/clients.md): the demo model's window and a short output cap.
            CLAUDE_CODE_MAX_CONTEXT_TOKENS: "65536",
            CLAUDE_CODE_MAX_OUTPUT_TOKENS: "1024",
          },
        },
      });
      for await (const m of run) seen.push(m as { type: string; subtype?: string });
      return seen;
    });
    const result = messages.find((m) => m.type === "result");
    expect({ result, sent: sent.map((r) => `${r.method} ${r.path} → ${r.status}`) }).toMatchObject({ result: { type: "result" } });
    expect(["success", "error_max_turns"]).toContain(result!.subtype!);
    expect(sent.filter((r) => r.path.startsWith("/v1/messages")).length).toBeGreaterThan(0);
    expectAnswered(sent);
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
}, 240_000);
