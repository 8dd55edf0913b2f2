#!/usr/bin/env bash
# Build a Worker crate into its wrangler config's `main`: by default the default
# Worker (worker/) into build/ (what the repo's wrangler.toml points at).
#   scripts/build.sh                     release build, optimised with wasm-opt
#   scripts/build.sh --dev               faster: skips wasm-opt
#   scripts/build.sh [--dev] <crate dir> <out dir>   another Worker crate (an
#                                        example), out dir relative to the crate
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$REPO_ROOT"
opt=()
if [ "${1:-}" = "--dev" ]; then
  opt=(--no-opt)
  shift
fi
crate="${1:-worker}"
out="${2:-../build}"
cd "$crate"
worker-build --release "${opt[@]}" --out-dir "$out"
