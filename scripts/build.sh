#!/usr/bin/env bash
# Build the Worker into build/ (what wrangler.toml's `main` points at).
#   scripts/build.sh          release build, optimised with wasm-opt
#   scripts/build.sh --dev    faster: skips wasm-opt
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$REPO_ROOT"
if [ "${1:-}" = "--dev" ]; then
  worker-build --release --no-opt
else
  worker-build --release
fi
