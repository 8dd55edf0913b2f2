#!/usr/bin/env bash
# Run streak-reminder-ts locally: build the default cron-fanout Worker, apply
# its migrations to a local D1, and serve it with this example's TypeScript
# Worker beside it in one `wrangler dev` on http://localhost:8787 (locally the
# cron trigger runs only when called: GET /cdn-cgi/local/scheduled).
# Secrets come from examples/streak-reminder-ts/.dev.vars (both Workers read
# it), created when missing with random library secrets and the GITHUB_TOKEN /
# TELEGRAM_BOT_TOKEN of your environment (never committed).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../../scripts/env.sh"
cd "$REPO_ROOT"
bash scripts/setup.sh
bash scripts/build.sh --dev

vars="$here/.dev.vars"
if [ ! -f "$vars" ]; then
  rand() { od -An -N24 -tx1 /dev/urandom | tr -d ' \n'; }
  (
    umask 077
    {
      echo "ADMIN_TOKEN=$(rand)"
      echo "DISPATCH_SECRET=$(rand)"
      echo "WEBHOOK_SECRET=$(rand)"
      echo "GITHUB_TOKEN=${GITHUB_TOKEN:-}"
      echo "TELEGRAM_BOT_TOKEN=${TELEGRAM_BOT_TOKEN:-}"
    } >"$vars"
  )
  echo "wrote $vars: ADMIN_TOKEN is in it; fill in GITHUB_TOKEN (and TELEGRAM_BOT_TOKEN) if empty"
fi

cd "$here"
wrangler d1 migrations apply DB --local -c cron-fanout.toml
exec wrangler dev -c cron-fanout.toml -c wrangler.toml
