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

# The e2e suite drives the dashboard in a real headless Chromium over WebDriver:
# Debian's chromium and chromium-driver (pinned only as far as apt pins them).
have_chromium() {
  { command -v chromium || command -v chromium-browser; } >/dev/null 2>&1 \
    && { command -v chromedriver || [ -x /usr/lib/chromium/chromedriver ]; } >/dev/null 2>&1
}
if ! have_chromium; then
  if command -v apt-get >/dev/null 2>&1; then
    step "apt-get install chromium chromium-driver"
    if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
      echo "setup: installing Chromium needs root: run as root or install sudo" >&2; exit 1
    fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver
  else
    echo "setup: Chromium and chromedriver are missing. Install them with your package" >&2
    echo "       manager (macOS: brew install --cask chromium chromedriver; Fedora:" >&2
    echo "       dnf install chromium chromedriver) so that chromium and chromedriver are" >&2
    echo "       on PATH; the e2e suite's browser checks need them." >&2
    exit 1
  fi
fi

echo "setup: ok (wrangler $(wrangler --version 2>/dev/null | tail -n1), node $(node --version), wasm-bindgen $WASM_BINDGEN_VERSION, $({ chromium --version || chromium-browser --version; } 2>/dev/null | head -n1))"
