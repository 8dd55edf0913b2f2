#!/usr/bin/env bash
# Install everything the build, the demo and the tests need, at pinned versions.
# Idempotent: a second run only checks. Needs only the package registries.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$REPO_ROOT"

step() { printf '\n==> %s\n' "$*"; }

if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  step "rustup target add wasm32-unknown-unknown"
  rustup target add wasm32-unknown-unknown
fi

# npm ci installs exactly package-lock.json: wrangler, a Node 22 binary for it
# (wrangler needs Node >= 22; the system Node may be older) and binaryen's wasm-opt.
if [ ! -x node_modules/.bin/wrangler ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  step "npm ci"
  npm ci --no-audit --no-fund
fi

if [ ! -x "$WASM_BINDGEN_BIN" ]; then
  step "cargo install wasm-bindgen-cli $WASM_BINDGEN_VERSION"
  cargo install wasm-bindgen-cli --version "=$WASM_BINDGEN_VERSION" \
    --root "$TOOLS_ROOT/wasm-bindgen-$WASM_BINDGEN_VERSION"
fi

if [ "$(worker-build --version 2>/dev/null || true)" != "$WORKER_BUILD_VERSION" ]; then
  step "cargo install worker-build $WORKER_BUILD_VERSION"
  cargo install worker-build --version "=$WORKER_BUILD_VERSION" --root "$TOOLS_ROOT"
fi

echo "setup: ok (wrangler $(wrangler --version 2>/dev/null | tail -n1), node $(node --version), wasm-bindgen $WASM_BINDGEN_VERSION)"
