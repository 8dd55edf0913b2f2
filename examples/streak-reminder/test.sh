#!/usr/bin/env bash
# Test streak-reminder: its host tests (the streak at day and zone edges, each
# API's answers, the kind through the in-memory outbound seam), then its e2e
# part: the Worker on `wrangler dev` against fakes of GitHub, Discord and
# Telegram served by the loadtest sink, its 18:00 schedule fired on a test clock.
set -euo pipefail
source "$(dirname "$0")/../../scripts/env.sh"
cd "$REPO_ROOT"
bash scripts/setup.sh
cargo test -p streak-reminder
cargo test -p loadtest --test sink_fakes
bash scripts/build.sh --dev examples/streak-reminder build
cargo run -q -p loadtest -- e2e --repo . --only-streak
