#!/usr/bin/env bash
# Where the no-limit fan-out's time goes: one `loadtest bench --only-fanout` round
# under `perf record`, cut to the fan-out itself (its batch's created_at to its
# last item's completed_at, read from the round's local D1), then workerd's CPU
# per 1,000 items by what its samples were doing. A contributor's tool, not a
# test: it needs perf (Debian: `apt-get install linux-perf`) and root or
# kernel.perf_event_paranoid <= 0, and its figures move with the machine.
#
#   scripts/profile-fanout.sh [checkout]   # default: this one
#
# Run it on two checkouts one after the other (e.g. this one and
# target/against/<rev>/, which `bench --against <rev>` builds) and compare the
# shares: the machine's speed moves every figure per item together.
set -euo pipefail
source "$(dirname "$0")/env.sh"
checkout="$(cd "${1:-$REPO_ROOT}" && pwd)"
command -v perf >/dev/null || { echo "perf not found (Debian: apt-get install linux-perf)" >&2; exit 1; }
command -v sqlite3 >/dev/null || { echo "sqlite3 not found (Debian: apt-get install sqlite3)" >&2; exit 1; }

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
cd "$checkout"
( cargo run --release -q -p loadtest -- bench --only-fanout --rounds 1 >"$out/bench.log" 2>&1 ) &
bench=$!
# The fan-out starts right after its subjects are seeded; 10 s covers it at
# 500 items/s or more.
until grep -q "seeding" "$out/bench.log" 2>/dev/null; do
  kill -0 "$bench" 2>/dev/null || { cat "$out/bench.log" >&2; exit 1; }
  sleep 0.2
done
perf record -k CLOCK_REALTIME -a -g -F 999 -o "$out/perf.data" -- sleep 10 >/dev/null 2>&1
wait "$bench"
grep -E "^round" "$out/bench.log"

db="$(ls .loadtest/bench-fanout-1-state/v3/d1/miniflare-D1DatabaseObject/*.sqlite | grep -v metadata)"
window="$(sqlite3 "$db" "SELECT b.created_at || ' ' || max(i.completed_at) || ' ' || count(*)
  FROM batches AS b JOIN cron_queue AS i ON i.batch_id = b.id
  GROUP BY b.id ORDER BY b.created_at DESC LIMIT 1")"
[ -n "$window" ] || { echo "no fan-out batch in $db" >&2; exit 1; }
perf script -i "$out/perf.data" --comm workerd -F comm,tid,time,ip,sym,dso 2>/dev/null >"$out/samples.txt"

python3 - "$out/samples.txt" $window <<'EOF'
import collections, re, sys

# A sample counts in the first group any frame of its stack matches.
GROUPS = [
    ("garbage collection", r"CollectGarbage|Scavenger|MarkCompact|cppgc::internal::(Sweeper|Marker)"),
    ("SQLite (D1 and the trace store)", r"sqlite3|SqliteDatabase|jsonTranslate|jsonb|jsonLookup|jsonParse"),
    ("tracing (local observability)", r"TailStream|tracing::"),
    ("HTTP between Workers, D1 and the sink", r"kj::Http|HttpClient|HttpServer|HttpService"),
    ("JavaScript and wasm (the Worker, its glue, miniflare)", r"\[JIT\]|Builtins_|Wasm|wasm"),
]
path, lo, hi, items = sys.argv[1], int(sys.argv[2]) / 1000, int(sys.argv[3]) / 1000, int(sys.argv[4])
counts, total = collections.Counter(), 0
stack, at = [], None

def count():
    global total
    if stack and at is not None and lo <= at <= hi:
        total += 1
        text = " | ".join(stack)
        counts[next((n for n, rx in GROUPS if re.search(rx, text)), "other (the event loop, V8's API)")] += 1

for line in open(path, errors="replace"):
    if not line.strip():
        count(); stack, at = [], None
    elif not line[0].isspace():
        at, stack = float(line.split()[2].rstrip(":")), []
    else:
        stack.append(line.strip())
count()
span = hi - lo
print(f"fan-out: {items} items in {span:.3f} s ({items / span:.0f} items/s); workerd busy "
      f"{total / 999 / span:.2f} of a core; {total / items * 1000:.0f} ms of CPU per 1,000 items")
for name, n in counts.most_common():
    print(f"  {100 * n / max(total, 1):5.1f} %  {n / items * 1000:6.1f} ms per 1,000 items  {name}")
EOF
