#!/usr/bin/env bash
# The library's public API, held to docs/reference/public-api.txt (a line per item
# a user's crate can name: `loadtest api-listing`). Fails when the two differ: a
# change to the API is made on purpose, with a CHANGELOG.md entry, then
#   scripts/public-api.sh --bless
# writes the new listing. --bless refuses a break (a line removed or changed)
# while Cargo.toml's version is still the listing's: a break bumps the version.
# The listing's version must have its section in CHANGELOG.md.
#
# rustdoc writes JSON on nightly only; RUSTC_BOOTSTRAP=1 lets this stable
# toolchain do it for this one command (the format is read by name, not by type).
# The listing is the host build's: `edge` and `DrainBatch` exist on wasm32 only.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$REPO_ROOT"

listing=docs/reference/public-api.txt
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)"

RUSTC_BOOTSTRAP=1 cargo rustdoc -q --lib -- -Z unstable-options --output-format json 2>/dev/null
now="$(mktemp)"
trap 'rm -f "$now"' EXIT
{
  echo "# cron-fanout $version: the public API (scripts/public-api.sh; CHANGELOG.md says what changed)"
  cargo run -q -p loadtest -- api-listing "${CARGO_TARGET_DIR:-target}/doc/cron_fanout.json"
} > "$now"

listed_version="$(sed -n '1s/^# cron-fanout \([^:]*\):.*/\1/p' "$listing" 2>/dev/null || true)"
changes() { diff <(tail -n +2 "$listing") <(tail -n +2 "$now") || true; }

if [ "${1:-}" = "--bless" ]; then
  if [ -f "$listing" ] && changes | grep -q '^<' && [ "$listed_version" = "$version" ]; then
    echo "public API: this removes or changes what $version offers:" >&2
    changes | grep '^<' | head -20 >&2
    echo "a break needs a new version in Cargo.toml and its CHANGELOG.md section" >&2
    exit 1
  fi
  grep -q "^## $version\b" CHANGELOG.md || {
    echo "public API: CHANGELOG.md has no '## $version' section" >&2
    exit 1
  }
  cp "$now" "$listing"
  echo "public API: wrote $listing ($(($(wc -l < "$listing") - 1)) items, $version)"
  exit 0
fi

if [ "$listed_version" != "$version" ]; then
  echo "public API: $listing is of ${listed_version:-nothing}, Cargo.toml says $version (scripts/public-api.sh --bless)" >&2
  exit 1
fi
grep -q "^## $version\b" CHANGELOG.md || {
  echo "public API: CHANGELOG.md has no '## $version' section" >&2
  exit 1
}
if ! cmp -s "$listing" "$now"; then
  echo "public API: the library's public API is not $listing's ('<' listed, '>' now):" >&2
  changes | head -40 >&2
  echo "say it in CHANGELOG.md (what changed, what to write instead), then scripts/public-api.sh --bless" >&2
  exit 1
fi
echo "public API: as listed ($(($(wc -l < "$listing") - 1)) items, $version, CHANGELOG.md has its section)"
