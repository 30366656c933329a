// Preloaded before every test file (bunfig.toml). Tests that run the real engines take about a
// second each on a quiet 2-core box and several times that when the box is busy; Bun's default
// per-test limit of 5 s would turn load into failures.
import { afterAll, setDefaultTimeout } from "bun:test";
import { stopPostgresCluster } from "./helpers/postgres";
import { stopAllHaproxy } from "./helpers/haproxy";

setDefaultTimeout(30_000);

// The run's PostgreSQL cluster (test/helpers/postgres.ts), when a test started one, is stopped by
// its PID once the last test is done.
afterAll(() => stopPostgresCluster());
// Likewise any haproxy a test started (test/helpers/haproxy.ts) and left running.
afterAll(() => stopAllHaproxy());
