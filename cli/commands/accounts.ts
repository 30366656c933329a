import { Command } from "commander";
import { formatMicros, parseUsd } from "../../src/2-services/billing/pricing";
import type { AccountInfo } from "../../src/2-services/accounts/types";
import { createConsoleAuth } from "../../src/2-services/console/auth";
import { sessionStoreOf } from "../../src/4-store/store";
import { systemClock } from "../../src/lib/clock";
import { usd, withAccounts } from "../context";
import { emit, table, UsageError, when } from "../output";

function human(a: AccountInfo): string {
  return [
    `account ${a.name} (${a.id})${a.role === "admin" ? " [admin]" : ""}`,
    `  balance:         ${formatMicros(a.balance_micros)}`,
    `  trial remaining: ${a.trial_tokens_remaining} tokens`,
    `  active keys:     ${a.active_keys}`,
  ].join("\n");
}

export function accountsCommand(): Command {
  const cmd = new Command("accounts").description("create, list and credit accounts");

  cmd
    .command("create <name>")
    .description("create an account")
    .option("--credit <usd>", "initial prepaid credit in USD", usd)
    .option("--admin", "give the account the admin role")
    .option("--json", "print JSON")
    .action((name: string, opts: { credit?: number; admin?: boolean; json?: boolean }, c: Command) =>
      withAccounts(c, async (accounts) => {
        const a = await accounts.createAccount(name, { creditMicros: opts.credit, role: opts.admin ? "admin" : "user" });
        emit(opts.json, a, human);
      }),
    );

  cmd
    .command("list")
    .description("list accounts with balance and trial")
    .option("--json", "print JSON")
    .action((opts: { json?: boolean }, c: Command) =>
      withAccounts(c, async (accounts) =>
        emit(opts.json, await accounts.listAccounts(), (list) =>
          table(
            list.map((a) => ({
              name: a.name,
              id: a.id,
              role: a.role,
              balance: formatMicros(a.balance_micros),
              trial_left: String(a.trial_tokens_remaining),
              keys: String(a.active_keys),
              created: when(a.created_at),
            })),
            ["name", "id", "role", "balance", "trial_left", "keys", "created"],
          ),
        ),
      ),
    );

  cmd
    .command("credit <name> <usd>")
    .description("add prepaid credit (USD, up to 6 decimals) to an account")
    .option("--note <text>", "note stored with the credit", "credit")
    .option("--json", "print JSON")
    .action((name: string, amount: string, opts: { note: string; json?: boolean }, c: Command) =>
      withAccounts(c, async (accounts) => emit(opts.json, await accounts.credit(name, usdArgument(amount), opts.note), human)),
    );

  cmd
    .command("password <name>")
    .description(
      "set the account's web console password (typed without echo, or one line on stdin); ends its console sessions, its sign-in back-off and its known browsers (works while the server runs)",
    )
    .action((name: string, _opts: object, c: Command) =>
      withAccounts(c, async (accounts, _config, store) => {
        const password = await readSecret(`password for ${name}: `);
        await createConsoleAuth({ sessions: sessionStoreOf(store), clock: systemClock, accounts }).setPassword(name, password);
        process.stderr.write(`console password set for ${name}\n`);
      }),
    );

  return cmd;
}

/** A line from the terminal without echo, or the first line of piped stdin. */
async function readSecret(prompt: string): Promise<string> {
  if (!process.stdin.isTTY) {
    const text = await new Response(Bun.stdin.stream()).text();
    return text.split(/\r?\n/)[0] ?? "";
  }
  process.stderr.write(prompt);
  process.stdin.setRawMode(true);
  return new Promise((resolve) => {
    let line = "";
    const onData = (buf: Buffer) => {
      for (const ch of buf.toString("utf8")) {
        if (ch === "\r" || ch === "\n" || ch === "\u0004") {
          process.stdin.setRawMode(false);
          process.stdin.off("data", onData);
          process.stdin.pause();
          process.stderr.write("\n");
          return resolve(line);
        }
        if (ch === "\u0003") process.exit(130);
        if (ch === "\u007f") line = line.slice(0, -1);
        else line += ch;
      }
    };
    process.stdin.on("data", onData);
  });
}

function usdArgument(text: string): number {
  try {
    return parseUsd(text);
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
}
