#!/usr/bin/env bash
# A Worker crate of one's own, outside this workspace, made from docs/guides/own-kind.md's
# "Write your own job kind" text as a user copies it (each block marked
# `<!-- outside: <file> -->`; only the cron-fanout dependency is pointed at this
# checkout): its host tests run and it is checked for wasm32. Then the same
# crate with its GET not reading the answer's body must fail a host test, as it
# would misbehave on the Worker.
#   scripts/outside.sh [dir]   dir: where to write the crate (default: a temporary one)
# It shares this workspace's target dir and Cargo.lock (the same versions, so
# nothing already built is built again).
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$REPO_ROOT"

if [ -n "${1:-}" ]; then
  dir="$1"
  rm -rf "$dir"
  mkdir -p "$dir"
else
  dir="$(mktemp -d)"
  trap 'rm -rf "$dir"' EXIT
fi
mkdir -p "$dir/src" "$dir/tests"

# Every fenced block after a marker goes into the marker's file, in page order.
awk -v dir="$dir" '
  /^<!-- outside: [^ ]+ -->$/ { file = dir "/" $3; next }
  file != "" && !inside && /^```/ { inside = 1; next }
  inside && /^```$/ { inside = 0; print "" >> file; file = ""; next }
  inside { print >> file }
' docs/guides/own-kind.md
for f in Cargo.toml src/lib.rs tests/feed_check.rs; do
  [ -s "$dir/$f" ] || { echo "docs/guides/own-kind.md has no block marked outside: $f" >&2; exit 1; }
done
grep -q '^cron-fanout = ' "$dir/Cargo.toml" || { echo "the page's Cargo.toml names no cron-fanout" >&2; exit 1; }
sed -i "s|^cron-fanout = .*|cron-fanout = { path = \"$REPO_ROOT\" }|" "$dir/Cargo.toml"
cp Cargo.lock "$dir/Cargo.lock"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$REPO_ROOT/target}"

cd "$dir"
printf '\n==> the page'"'"'s crate, outside the workspace: cargo test (host)\n'
cargo test --quiet
printf '\n==> the page'"'"'s crate: cargo check --target wasm32-unknown-unknown\n'
cargo check --quiet --target wasm32-unknown-unknown --lib

printf '\n==> the page'"'"'s crate with its GET not reading the body: a host test must fail\n'
get='Request::get(&p.feed_url)'
grep -qF "$get" src/lib.rs || { echo "the page's kind has no $get" >&2; exit 1; }
sed -i 's|Request::get(&p.feed_url)|Request::new("GET", \&p.feed_url)|' src/lib.rs
if cargo test --quiet >test.log 2>&1; then
  cat test.log
  echo "FAIL: the host tests pass with a GET that does not read the feed" >&2
  exit 1
fi
grep -F "the answer's body was not read (Request::read_body)" test.log >/dev/null || {
  cat test.log
  echo "FAIL: the host tests failed, but not on the unread body" >&2
  exit 1
}
echo "ok: a host test fails, naming the body not read"
