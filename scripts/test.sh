#!/usr/bin/env bash
# Set up and run every test: host tests (pure core, SQL conformance on SQLite,
# loadtest units), the docs' Worker crate of one's own built outside the
# workspace (scripts/outside.sh), the OpenAPI document's validity, the TypeScript
# handler package and examples (tsc --noEmit,
# Vitest inside workerd), then the end-to-end suite against the built Worker on
# `wrangler dev` with local D1, including the dashboard driven in a headless
# Chromium (loadtest/src/e2e/ui/). Exits non-zero on any failure.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$REPO_ROOT"

bash scripts/setup.sh

printf '\n==> host tests (cargo test --workspace)\n'
cargo test --workspace

printf '\n==> the library'"'"'s public API is docs/reference/public-api.txt'"'"'s, each change in CHANGELOG.md\n'
bash scripts/public-api.sh

printf '\n==> OpenAPI: src/api/openapi.json is a valid OpenAPI 3.1 document\n'
validate-api src/api/openapi.json

printf '\n==> a Worker crate of one'"'"'s own, outside the workspace, from docs/guides/own-kind.md (host tests, wasm32 check)\n'
bash scripts/outside.sh

printf '\n==> TypeScript: tsc --noEmit and the Vitest suites inside workerd (packages/handler, examples/*-ts)\n'
npm run typecheck --workspaces --if-present
npm run test --workspaces --if-present

printf '\n==> build the Worker (release, as deployed)\n'
bash scripts/build.sh

printf '\n==> build the example Worker of its own kind (examples/hello-kind)\n'
bash scripts/build.sh --dev examples/hello-kind build

printf '\n==> build the app the project started from, on the library (examples/streak-reminder)\n'
bash scripts/build.sh --dev examples/streak-reminder build

printf '\n==> end-to-end suite (loadtest e2e against wrangler dev)\n'
cargo run -q -p loadtest -- e2e --repo .

# One invocation dispatching 12,000 items well inside one 62 s dispatch limit: the
# Worker once created a timer per dispatch and crashed at the runtime's 10,000
# live timers (src/core/drain/watchdog.rs). Any machine doing 161+ items/s would catch it.
# It also bounds what an item costs in D1 (docs/benchmarks.md, "Cost per item"): rows
# written per item (3.004 measured: insert 1, claim 1, commit 1, the rest per
# batch or invocation) and statements per item (0.026-0.029 measured; fewer
# outcomes per flush on a loaded machine cost a little more, hence 0.035).
# --check-cost: the batch's `cost` is exactly the sum of its invocations' shares,
# and its rows written and read within 1 % of what local D1 reported for the run.
printf '\n==> regression: 12,000 items drained by one invocation (runtime timer cap, D1 cost, cost per batch)\n'
cargo run -q -p loadtest -- run --repo . --scenario happy --job noop -n 12000 \
  --var JOB_TIMEOUT_MS=60000 --var INVOCATION_DEADLINE_MS=300000 \
  --max-rows-written-per-item 3.01 --max-statements-per-item 0.035 --check-cost

# The same items, each holding one limit key of concurrency 25 (flow control): rows
# written per item stay at 3 plus a batch counter row per flush, and a flush holds at
# most the 25 items in flight, so 3.04 is the floor; how many of the 25 have returned
# when the drain flushes depends on the machine (3.043 to 3.053 measured), hence 3.06.
# Statements are bounded below by the slot rule: a claim (three
# statements: hold, charge, claim) takes at most the 25 free slots, and a flush
# commits what they free (0.168 measured). Ticks of 15 s: on wrangler dev the
# Worker and its local D1 share a thread, and one long drain of keyed claims
# leaves it no time to answer the harness (docs/guides/flow-control.md).
printf '\n==> regression: 12,000 items, each holding a key of concurrency 25 (flow control cost)\n'
cargo run -q -p loadtest -- run --repo . --scenario happy --job noop -n 12000 \
  --key-concurrency 25 --var JOB_TIMEOUT_MS=5000 --var INVOCATION_DEADLINE_MS=15000 \
  --max-rows-written-per-item 3.06 --max-statements-per-item 0.2
