import { Command } from "commander";
import { NODE_LEASE_MS } from "../../src/2-services/cluster/node";
import { nodeStoreOf } from "../../src/4-store/store";
import type { NodeRow } from "../../src/4-store/nodes";
import { withStore } from "../context";
import { emit, table, UsageError } from "../output";

// `appliance nodes` (issue 45): the nodes of the cluster on the configured PostgreSQL store, and
// draining one (it takes no new work; its requests in flight finish).

const stateOf = (n: NodeRow) => (n.ageMs > NODE_LEASE_MS ? "gone" : n.draining ? "draining" : "serving");

function view(n: NodeRow) {
  return {
    id: n.id,
    url: n.url,
    version: n.version,
    state: stateOf(n),
    last_heartbeat_s: Math.round(n.ageMs / 100) / 10,
    models: n.models,
    gpus: n.gpus,
  };
}

export function nodesCommand(): Command {
  const cmd = new Command("nodes")
    .description("the nodes of the cluster (every appliance on this PostgreSQL store): id, URL, version, last heartbeat, models, GPUs, state")
    .option("--json", "print JSON")
    .action((opts: { json?: boolean }, c: Command) =>
      withStore(c, async (store) => {
        const nodes = nodeStoreOf(store);
        if (!nodes) {
          emit(opts.json, { object: "list", data: [] }, () => "one node: the SQLite store is not shared (set [store] url to run several nodes on one PostgreSQL)");
          return;
        }
        const data = (await nodes.list()).map(view);
        emit(opts.json, { object: "list", data }, () =>
          table(
            data.map((n) => ({
              id: n.id,
              url: n.url,
              version: n.version,
              state: n.state,
              heartbeat: `${n.last_heartbeat_s}s ago`,
              models: n.models.map((m) => `${m.id}${m.loaded ? "*" : ""}`).join(", ") || "-",
              gpus: n.gpus.map((g) => `${g.count}× ${g.gpu}`).join(", ") || "-",
            })),
            ["id", "url", "version", "state", "heartbeat", "models", "gpus"],
          ) + "\n(* loaded)",
        );
      }),
    );

  cmd
    .command("drain <node>")
    .description("stop a node taking new work (/health answers 503, new requests 503 node_not_serving); its requests in flight finish; --undo takes it back")
    .option("--undo", "take new work again")
    .option("--json", "print JSON")
    .action((id: string, opts: { undo?: boolean; json?: boolean }, c: Command) =>
      withStore(c, async (store) => {
        const nodes = nodeStoreOf(store);
        if (!nodes) throw new UsageError("the SQLite store has one node: nothing to drain (stop the server instead)");
        if (!(await nodes.setDraining(id, !opts.undo))) throw new UsageError(`no node ${id} (appliance nodes lists them)`);
        emit(opts.json, { id, draining: !opts.undo }, () => `${id} ${opts.undo ? "takes new work again" : "is draining: no new work from its next heartbeat (3 s)"}`);
      }),
    );
  return cmd;
}
