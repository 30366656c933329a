import { expect, test } from "bun:test";
import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { query } from "@anthropic-ai/claude-agent-sdk";
import { tempDir } from "../helpers/app";
import { claudeCodeEnv } from "./agents";
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
          // The option replaces the process environment: PATH, then what Claude Code needs.
          env: { PATH: process.env.PATH ?? "/usr/bin:/bin", ...claudeCodeEnv(proxy.url, key, home) },
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
