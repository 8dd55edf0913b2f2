#!/usr/bin/env bash
# Install everything the build, the demo and the tests need, at pinned versions.
# Idempotent: a second run only checks. Needs only the package registries.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "$0")/env.sh"
cd "$REPO_ROOT"

step() { printf '\n==> %s\n' "$*"; }

if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  step "rustup target add wasm32-unknown-unknown"
  rustup target add wasm32-unknown-unknown
fi

# npm ci installs exactly package-lock.json: wrangler, a Node 22 binary for it
# (wrangler needs Node >= 22; the system Node may be older), binaryen's wasm-opt,
# and for the TypeScript workspaces (packages/handler, the examples on it)
# TypeScript, Vitest and the Workers Vitest plugin, linking the workspaces; the
# OpenAPI validator and ajv (scripts/test.sh and the e2e suite check
# src/api/openapi.json and the answers against it).
if [ ! -x node_modules/.bin/wrangler ] || [ ! -x node_modules/.bin/vitest ] \
  || [ ! -x node_modules/.bin/validate-api ] \
  || [ ! -e node_modules/cron-fanout-handler ] \
  || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  step "npm ci"
  npm ci --no-audit --no-fund
fi

# Root for apt-get: nothing when root, sudo when there is one.
as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo "$@"; else
    echo "setup: installing $* needs root: run as root or install sudo" >&2; exit 1
  fi
}
apt_updated=""
apt_install() {
  step "apt-get install $*"
  [ -n "$apt_updated" ] || { as_root apt-get update -qq; apt_updated=1; }
  # Through env: sudo drops the caller's environment.
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}
# /etc/os-release's ID and ID_LIKE, to pick Debian's or Ubuntu's package names.
os_ids() { (. /etc/os-release 2>/dev/null && echo "${ID:-} ${ID_LIKE:-}") || true; }

# Native build dependencies, checked by what the build uses rather than by package
# name: a C compiler (rusqlite's bundled SQLite and other build scripts, always), and
# pkg-config + OpenSSL's headers (worker-build's HTTP client links OpenSSL through
# openssl-sys; needed only while worker-build is still to be installed).
need_worker_build() { [ "$(worker-build --version 2>/dev/null || true)" != "$WORKER_BUILD_VERSION" ]; }
missing_build_deps() {
  command -v cc >/dev/null 2>&1 || echo build-essential
  if need_worker_build; then
    command -v pkg-config >/dev/null 2>&1 || echo pkg-config
    pkg-config --exists openssl 2>/dev/null || echo libssl-dev
  fi
}
missing="$(missing_build_deps | sort -u | tr '\n' ' ')"
if [ -n "${missing// /}" ]; then
  if command -v apt-get >/dev/null 2>&1; then
    # shellcheck disable=SC2086 # one word per package
    apt_install $missing
  else
    echo "setup: missing build dependencies (Debian/Ubuntu names): $missing" >&2
    echo "       Install a C compiler (cc), pkg-config and OpenSSL's development headers" >&2
    echo "       with your package manager (macOS: xcode-select --install, brew install" >&2
    echo "       pkg-config openssl@3; Fedora: dnf install gcc pkgconf-pkg-config" >&2
    echo "       openssl-devel), then run this again." >&2
    exit 1
  fi
fi

# worker-build is built --locked, with the dependency versions its own Cargo.lock
# names, so a new release of one of them cannot change or break it. wasm-bindgen-cli
# 0.2.130 cannot be: its Cargo.lock names webpki-roots 1.0.11, which the crates.io
# index this project's machines reach does not have, so its dependencies resolve anew.
if [ ! -x "$WASM_BINDGEN_BIN" ]; then
  step "cargo install wasm-bindgen-cli $WASM_BINDGEN_VERSION"
  cargo install wasm-bindgen-cli --version "=$WASM_BINDGEN_VERSION" \
    --root "$TOOLS_ROOT/wasm-bindgen-$WASM_BINDGEN_VERSION"
fi

if need_worker_build; then
  step "cargo install worker-build $WORKER_BUILD_VERSION"
  cargo install --locked worker-build --version "=$WORKER_BUILD_VERSION" --root "$TOOLS_ROOT"
fi

# The e2e suite drives the dashboard in a real headless Chromium over WebDriver,
# from the distribution's packages (pinned only as far as apt pins them): Debian's
# chromium + chromium-driver; on Ubuntu chromium-browser + chromium-chromedriver.
have_chromium() {
  { command -v chromium || command -v chromium-browser; } >/dev/null 2>&1 \
    && { command -v chromedriver || [ -x /usr/lib/chromium/chromedriver ]; } >/dev/null 2>&1
}
if ! have_chromium; then
  if command -v apt-get >/dev/null 2>&1; then
    case " $(os_ids) " in
      *" ubuntu "*)
        echo "setup: Ubuntu packages Chromium as a snap: chromium-browser and" >&2
        echo "       chromium-chromedriver are wrappers that install it with snapd, which" >&2
        echo "       does not run in most containers; there, install a chromium and a" >&2
        echo "       matching chromedriver by other means and put both on PATH." >&2
        apt_install chromium-browser chromium-chromedriver ;;
      *) apt_install chromium chromium-driver ;;
    esac
    have_chromium || {
      echo "setup: chromium and chromedriver are still not on PATH after apt-get" >&2; exit 1
    }
  else
    echo "setup: Chromium and chromedriver are missing. Install them with your package" >&2
    echo "       manager (macOS: brew install --cask chromium chromedriver; Fedora:" >&2
    echo "       dnf install chromium chromedriver) so that chromium and chromedriver are" >&2
    echo "       on PATH; the e2e suite's browser checks need them." >&2
    exit 1
  fi
fi

echo "setup: ok (wrangler $(wrangler --version 2>/dev/null | tail -n1), node $(node --version), wasm-bindgen $WASM_BINDGEN_VERSION, $({ chromium --version || chromium-browser --version; } 2>/dev/null | head -n1))"
