#!/usr/bin/env bash
# Set up, build and run a demo batch locally: migrations on local D1, `wrangler dev`,
# a local webhook sink, ~200 subjects, a one-off schedule due now, then a tick every second
# with a progress bar until the batch finishes; then it prints the dashboard URL
# and the admin token and keeps the Worker up until Ctrl-C. Secrets come from .dev.vars
# (generated with random values when missing; never committed).
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$REPO_ROOT"

bash scripts/setup.sh
bash scripts/build.sh
cargo run -q --release -p loadtest -- demo --repo . "$@"
