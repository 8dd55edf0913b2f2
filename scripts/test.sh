#!/usr/bin/env bash
# Set up and run every test: host tests (pure core, SQL conformance on SQLite,
# loadtest units), then the end-to-end suite against the built Worker on
# `wrangler dev` with local D1, including the dashboard driven in a headless
# Chromium (loadtest/src/ui.rs). Exits non-zero on any failure.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$REPO_ROOT"

bash scripts/setup.sh

printf '\n==> host tests (cargo test --workspace)\n'
cargo test --workspace

printf '\n==> build the Worker (release, as deployed)\n'
bash scripts/build.sh

printf '\n==> build the example Worker of its own kind (examples/hello-kind)\n'
bash scripts/build.sh --dev examples/hello-kind build

printf '\n==> end-to-end suite (loadtest e2e against wrangler dev)\n'
cargo run -q -p loadtest -- e2e --repo .

# One invocation dispatching 12,000 items well inside one 62 s dispatch limit: the
# Worker once created a timer per dispatch and crashed at the runtime's 10,000
# live timers (src/core/watchdog.rs). Any machine doing 161+ items/s would catch it.
printf '\n==> regression: 12,000 items drained by one invocation (runtime timer cap)\n'
cargo run -q -p loadtest -- run --repo . --scenario happy --job noop -n 12000 \
  --var JOB_TIMEOUT_MS=60000 --var INVOCATION_DEADLINE_MS=300000
