#!/usr/bin/env bash
# Test streak-reminder-ts: tsc --noEmit and its Vitest suite inside workerd (the
# streak at day, zone and DST edges, each API's answers, the check through an
# in-memory fetch), then its e2e part: the default Worker and this one in one
# `wrangler dev` against fakes of GitHub, Discord and Telegram served by the
# loadtest sink, the 18:00 schedule fired on a test clock.
set -euo pipefail
source "$(dirname "$0")/../../scripts/env.sh"
cd "$REPO_ROOT"
bash scripts/setup.sh
npm run typecheck -w packages/handler -w examples/streak-reminder-ts
npm run test -w examples/streak-reminder-ts
bash scripts/build.sh --dev
cargo run -q -p loadtest -- e2e --repo . --only-streak-ts
