import { existsSync, readdirSync } from "node:fs";
import { join, resolve } from "node:path";
import pins from "./agents.json";

// Where test/setup-agents.sh installed the pinned coding agents, and their native binaries.

const DIR = process.env.APPLIANCE_AGENTS_DIR ?? resolve(import.meta.dir, "../../.cache/agents");
const modules = join(DIR, "node_modules");

function platformPackage(scope: string, prefix: string): string | null {
  const at = join(modules, scope);
  const name = existsSync(at) ? readdirSync(at).find((n) => n.startsWith(prefix)) : undefined;
  return name ? join(at, name) : null;
}

/** The claude and codex binaries at their pinned versions; throws saying how to install them. */
export function agentBinaries(): { claude: string; codex: string; pins: typeof pins } {
  const claudePkg = platformPackage("@anthropic-ai", "claude-code-linux-");
  const codexPkg = platformPackage("@openai", "codex-linux-");
  const codexVendor = codexPkg && existsSync(join(codexPkg, "vendor")) ? readdirSync(join(codexPkg, "vendor"))[0] : undefined;
  const claude = claudePkg && join(claudePkg, "claude");
  const codex = codexPkg && codexVendor && join(codexPkg, "vendor", codexVendor, "bin", "codex");
  if (!claude || !existsSync(claude) || !codex || !existsSync(codex))
    throw new Error(`the coding agents are not installed in ${DIR}: run test/setup-agents.sh (part of the README's test command)`);
  return { claude, codex, pins };
}

/** The other coding-agent CLIs (agent-clis.test.ts), at their pinned versions; throws saying how to install them. */
export function cliBinaries(): Record<"opencode" | "kilo" | "pi" | "qwen" | "cn" | "cline", string> {
  const bins = {
    opencode: join(modules, "opencode-linux-x64", "bin", "opencode"),
    kilo: join(modules, "@kilocode", "cli-linux-x64", "bin", "kilo"),
    pi: join(modules, ".bin", "pi"),
    qwen: join(modules, ".bin", "qwen"),
    cn: join(modules, ".bin", "cn"),
    cline: join(modules, ".bin", "cline"),
  };
  const missing = Object.values(bins).filter((b) => !existsSync(b));
  if (missing.length) throw new Error(`coding agents missing in ${DIR} (${missing.join(", ")}): run test/setup-agents.sh (part of the README's test command)`);
  return bins;
}

/** Runs an agent to the end (or kills it after `limitMs`) with only the given environment (and PATH). */
export async function runAgent(cmd: string[], env: Record<string, string>, cwd: string, limitMs = 240_000) {
  const p = Bun.spawn(cmd, { cwd, env: { PATH: process.env.PATH ?? "/usr/bin:/bin", ...env }, stdin: "ignore", stdout: "pipe", stderr: "pipe" });
  const timer = setTimeout(() => p.kill("SIGKILL"), limitMs);
  const [stdout, stderr, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  clearTimeout(timer);
  return { code, stdout, stderr };
}

/** The requests an agent sent, one line, for a failing assertion's message. */
export const summary = (sent: { method: string; path: string; status: number }[]) => sent.map((r) => `${r.method} ${r.path} → ${r.status}`).join(", ");

/**
 * The environment the docs give Claude Code (and the Claude Agent SDK, which runs it) against the
 * appliance (web/docs/clients.md): the base URL and key, kept off Anthropic's servers, the demo
 * model's window, and a smaller output cap so a random-weights answer ends in seconds (Claude Code
 * asks 32,000 by default).
 */
export function claudeCodeEnv(baseUrl: string, key: string, home: string): Record<string, string> {
  return {
    HOME: home,
    CLAUDE_CONFIG_DIR: join(home, ".claude"),
    ANTHROPIC_BASE_URL: baseUrl,
    ANTHROPIC_API_KEY: key,
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
    DISABLE_TELEMETRY: "1",
    CLAUDE_CODE_MAX_CONTEXT_TOKENS: "65536",
    CLAUDE_CODE_MAX_OUTPUT_TOKENS: "1024",
  };
}
