#!/usr/bin/env bash
# Set up and run every test: host tests (pure core, SQL conformance on SQLite,
# loadtest units), then the end-to-end suite against the built Worker on
# `wrangler dev` with local D1. Exits non-zero on any failure.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$REPO_ROOT"

bash scripts/setup.sh

printf '\n==> host tests (cargo test --workspace)\n'
cargo test --workspace

printf '\n==> build the Worker (release, as deployed)\n'
bash scripts/build.sh

printf '\n==> end-to-end suite (loadtest e2e against wrangler dev)\n'
cargo run -q -p loadtest -- e2e --repo .
