# Sourced by the other scripts: where the pinned tools live and how the build finds
# them. Tools install outside the checkout so fresh clones on one machine share them.
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS_ROOT="${CRON_FANOUT_TOOLS:-$HOME/.cache/cron-fanout/tools}"
WORKER_BUILD_VERSION="0.8.7"
# wasm-bindgen-cli must match the wasm-bindgen crate in Cargo.lock exactly.
WASM_BINDGEN_VERSION="$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' "$REPO_ROOT/Cargo.lock")"

export PATH="$REPO_ROOT/node_modules/.bin:$TOOLS_ROOT/bin:$HOME/.cargo/bin:$PATH"
# worker-build would download these from GitHub; point it at pinned local copies.
export WASM_BINDGEN_BIN="$TOOLS_ROOT/wasm-bindgen-$WASM_BINDGEN_VERSION/bin/wasm-bindgen"
export WASM_OPT_BIN="$REPO_ROOT/node_modules/.bin/wasm-opt"
export ESBUILD_BIN="$REPO_ROOT/node_modules/@esbuild/linux-x64/bin/esbuild"
export WRANGLER_SEND_METRICS=false
