// Preloaded before every test file (bunfig.toml). Tests that run the real engines take about a
// second each on a quiet 2-core box and several times that when the box is busy; Bun's default
// per-test limit of 5 s would turn load into failures.
import { setDefaultTimeout } from "bun:test";

setDefaultTimeout(30_000);
