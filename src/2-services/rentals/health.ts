import { isRentable, type RentableNode } from "./inventory";
import type { RentalsOptions } from "./options";

// The rentals service's launchers as it sees them: each by name, what is wrong with each as last
// checked, and so which nodes are rentable now.

/** How often launchers are checked (an offline one's nodes are not listed or rentable). */
const HEALTH_EVERY_MS = 30_000;

export type LauncherHealth = ReturnType<typeof createLauncherHealth>;

export function createLauncherHealth(o: Pick<RentalsOptions, "launchers" | "nodes" | "reserved" | "clock" | "logger">) {
  /** What is wrong with each launcher (null: healthy), as last checked; unchecked counts as healthy. */
  const launcherProblems = new Map<string, string | null>();
  let lastHealthCheck = -Infinity;

  const launcherOf = (name: string) => {
    const l = o.launchers[name];
    if (!l) throw new Error(`no launcher "${name}" is configured`);
    return l;
  };

  async function checkLaunchers() {
    lastHealthCheck = o.clock.now();
    const used = new Set(o.nodes().map((n) => n.launcher));
    for (const [name, l] of Object.entries(o.launchers)) {
      if (!used.has(name)) continue;
      const problem = await l.health().catch((e) => `health check failed: ${(e as Error).message}`);
      if (problem !== (launcherProblems.get(name) ?? null)) {
        if (problem) o.logger.warn("rental launcher offline", { launcher: name, problem });
        else if (launcherProblems.has(name)) o.logger.info("rental launcher online", { launcher: name });
      }
      launcherProblems.set(name, problem);
    }
  }

  /** Nodes that are rentable (inventory), whose launcher is configured and healthy, and are not reserved. */
  function rentable(): RentableNode[] {
    const reserved = o.reserved?.() ?? new Set<string>();
    return o.nodes().filter((n): n is RentableNode => isRentable(n) && !!o.launchers[n.launcher] && !launcherProblems.get(n.launcher) && !reserved.has(n.node_id));
  }

  return {
    launcherOf,
    check: checkLaunchers,
    /** Whether the launchers are due to be checked again at `now`. */
    due: (now: number) => now - lastHealthCheck >= HEALTH_EVERY_MS,
    /** What is wrong with launcher `name`, as last checked (undefined: unchecked, null: healthy). */
    problem: (name: string) => launcherProblems.get(name),
    rentable,
    problems: (): Record<string, string | null> => Object.fromEntries(Object.keys(o.launchers).map((n) => [n, launcherProblems.get(n) ?? null])),
  };
}
