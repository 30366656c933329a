import { Command } from "commander";
import type { KeyInfo, Scope } from "../../src/2-services/accounts/types";
import { intOption, withAccounts } from "../context";
import { emit, table, UsageError, when } from "../output";

function cap(n: number | null): string {
  return n === null || n === 0 ? "none" : String(n);
}

function human(k: KeyInfo): string {
  return [
    `key ${k.id} ${k.display} (${k.kind}) of account ${k.account}${k.revoked_at ? ` — revoked ${when(k.revoked_at)}` : ""}`,
    `  scopes:             ${k.scopes.join(", ") || "(none)"}`,
    `  max_active_rentals: ${k.max_active_rentals}`,
    `  rpm / in-flight:    ${cap(k.rpm_limit)} / ${cap(k.inflight_limit)}`,
  ].join("\n");
}

function shownOnce(r: { key: string; info: KeyInfo }): string {
  return `${human(r.info)}\n\n    ${r.key}\n\nThis key is shown once; only its hash is stored.`;
}

function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}

export function keysCommand(): Command {
  const cmd = new Command("keys").description("create, list, revoke, rotate and configure API keys");

  cmd
    .command("create")
    .description("create a key (the account's one free key, or a premium key with --premium)")
    .requiredOption("--account <name>", "account name or id")
    .option("--premium", "premium key: bills per token from the account's balance")
    .option("--scope <scope>", "extra scope to enable (rental); repeatable", collect, [] as string[])
    .option("--name <name>", "a label for the key")
    .option("--max-active-rentals <n>", "cap on concurrently active rentals", intOption("--max-active-rentals"))
    .option("--rpm <n>", "requests per minute cap (premium keys; 0 = none)", intOption("--rpm"))
    .option("--inflight <n>", "in-flight requests cap (premium keys; 0 = none)", intOption("--inflight"))
    .option("--json", "print JSON (includes the full key, once)")
    .action((opts, c: Command) =>
      withAccounts(c, async (accounts) => {
        const r = await accounts.createKey({
          account: opts.account,
          kind: opts.premium ? "premium" : "free",
          name: opts.name,
          scopes: ["inference", ...(opts.scope as string[])] as Scope[],
          maxActiveRentals: opts.maxActiveRentals,
          rpm: opts.rpm,
          inflight: opts.inflight,
        });
        emit(opts.json, { key: r.key, ...r.info }, () => shownOnce(r));
      }),
    );

  cmd
    .command("list")
    .description("list keys (prefix and last 4 characters only)")
    .option("--account <name>", "only this account's keys")
    .option("--all", "include revoked keys")
    .option("--json", "print JSON")
    .action((opts: { account?: string; all?: boolean; json?: boolean }, c: Command) =>
      withAccounts(c, async (accounts) => {
        const keys = (await accounts.listKeys(opts.account)).filter((k) => opts.all || k.revoked_at === null);
        emit(opts.json, keys, (list) =>
          table(
            list.map((k) => ({
              id: k.id,
              account: k.account,
              key: k.display,
              // The account's console key (the web console's Chat acts through it; its secret was never shown).
              kind: k.purpose === "console" ? "console" : k.kind,
              scopes: k.scopes.join(","),
              created: when(k.created_at),
              last_used: when(k.last_used_at),
              status: k.revoked_at ? "revoked" : "active",
            })),
            ["id", "account", "key", "kind", "scopes", "created", "last_used", "status"],
          ),
        );
      }),
    );

  cmd
    .command("revoke <key>")
    .description("revoke a key (by id or full key); it stops working at once, and its running GPU rentals stop, billed to now")
    .option("--json", "print JSON")
    .action((key: string, opts: { json?: boolean }, c: Command) =>
      withAccounts(c, async (accounts) => emit(opts.json, await accounts.revokeKey(key), human)),
    );

  cmd
    .command("rotate <key>")
    .description("replace a key's secret: same settings, new key, the old one revoked (its GPU rentals move to the new key)")
    .option("--json", "print JSON (includes the new key, once)")
    .action((key: string, opts: { json?: boolean }, c: Command) =>
      withAccounts(c, async (accounts) => {
        const r = await accounts.rotateKey(key);
        emit(opts.json, { key: r.key, ...r.info, revoked: r.old.id }, () => `${shownOnce(r)}\nRevoked ${r.old.id}.`);
      }),
    );

  cmd
    .command("scope <key> <scope> <state>")
    .description("turn a scope on or off, e.g. `keys scope key_… rental on` (the GPU Rentals scope)")
    .option("--json", "print JSON")
    .action((key: string, scope: string, state: string, opts: { json?: boolean }, c: Command) =>
      withAccounts(c, async (accounts) => {
        if (state !== "on" && state !== "off") throw new UsageError(`state must be "on" or "off", got "${state}"`);
        emit(opts.json, await accounts.setScope(key, scope, state === "on"), human);
      }),
    );

  cmd
    .command("set <key>")
    .description("change a key's settings")
    .option("--name <name>", "label")
    .option("--max-active-rentals <n>", "cap on concurrently active rentals", intOption("--max-active-rentals"))
    .option("--rpm <n>", "requests per minute cap (premium keys; 0 = none)", intOption("--rpm"))
    .option("--inflight <n>", "in-flight requests cap (premium keys; 0 = none)", intOption("--inflight"))
    .option("--json", "print JSON")
    .action((key: string, opts, c: Command) =>
      withAccounts(c, async (accounts) =>
        emit(
          opts.json,
          await accounts.setKey(key, { name: opts.name, maxActiveRentals: opts.maxActiveRentals, rpm: opts.rpm, inflight: opts.inflight }),
          human,
        ),
      ),
    );

  return cmd;
}
