// A `service` handler written with cron-fanout-handler (packages/handler):
// cron-fanout POSTs each item here through a service binding; `handler` checks
// the delivery, hands it to the function below, and answers with the outcome it
// returns: done(), retry(reason, { afterSeconds }) or fail(reason). Channels are
// reported with ctx.channel(name, outcome): cron-fanout records each, and the
// next attempt's ctx.delivered(name) says which got through, so a retry sends
// only the rest.
//
// This one does what the item's `data` asks, so the e2e suite can ask for each
// answer: {"outcome": "retry", "times": 1} retries attempt 1, then is done;
// {"outcome": "fail", "reason": "unknown login"} fails for good;
// {"after_seconds": 2} asks for the retry 2 s later; {"sleep_ms": 4000,
// "times": 1} answers attempt 1 late; {"channels": {"<name>": "<url>", ...}}
// POSTs a message to each URL not delivered yet, one channel each;
// {"retry_channel": "slow", "after_seconds": 40} reports channel "slow" to be
// retried 40 s later (that item's own delay: nothing else waits). Its path
// /malformed answers what no handler should: cron-fanout retries the item.
// It does an item's work once per Idempotency-Key; `handler` answers the calls
// of `POST /probe` (Fanout-Probe: 1) without calling it, so none takes a key.
import { type Outcome, done, fail, handler, retry } from "cron-fanout-handler";

interface Asked {
  outcome?: "retry" | "fail";
  reason?: string;
  after_seconds?: number;
  times?: number;
  sleep_ms?: number;
  channels?: Record<string, string>;
  retry_channel?: string;
}

/** Sends one channel's message; its answer is the channel's outcome. */
async function send(url: string, content: string): Promise<Outcome> {
  let answer: Response;
  try {
    answer = await fetch(url, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ content }),
    });
  } catch (e) {
    return retry(`network error: ${String(e)}`);
  }
  await answer.body?.cancel();
  const status = answer.status;
  if (status >= 200 && status < 300) return done();
  if ([408, 425, 429].includes(status) || status >= 500) {
    const wait = Number(answer.headers.get("Retry-After") ?? Number.NaN);
    return retry(`HTTP ${status}`, wait >= 0 ? { afterSeconds: wait } : {});
  }
  return fail(`HTTP ${status}`);
}

// The keys of the items without channels whose work is done, kept in memory:
// enough for one local run (a real handler keeps them where they last, KV or D1).
const doneKeys = new Set<string>();

const items = handler<Asked | null>(async (item, ctx) => {
  if (doneKeys.has(item.idempotency_key)) return done();
  const asked = item.data ?? {};
  // Misbehave on the first `times` attempts (all of them without `times`).
  const early = item.attempt <= (asked.times ?? Number.MAX_SAFE_INTEGER);
  if (asked.sleep_ms && early) {
    await new Promise((resolve) => setTimeout(resolve, asked.sleep_ms));
  }
  // Every channel an earlier attempt did not deliver, all at once.
  const todo = Object.entries(asked.channels ?? {}).filter(([name]) => !ctx.delivered(name));
  const message = `item ${item.item_id}, attempt ${item.attempt}`;
  const outcomes = await Promise.all(todo.map(([, url]) => send(url, message)));
  todo.forEach(([name], i) => ctx.channel(name, outcomes[i] ?? done()));
  if (asked.retry_channel !== undefined) {
    const after = asked.after_seconds;
    ctx.channel(asked.retry_channel, retry("asked", after === undefined ? {} : { afterSeconds: after }));
  }
  if (!early || asked.outcome === undefined) {
    // An item with channels is done when each is: its retries send the rest.
    if (asked.channels === undefined) doneKeys.add(item.idempotency_key);
    return done();
  }
  const reason = asked.reason ?? `${asked.outcome} asked for attempt ${item.attempt}`;
  if (asked.outcome === "fail") return fail(reason);
  const after = asked.after_seconds;
  return retry(reason, after === undefined ? {} : { afterSeconds: after });
});

export default {
  async fetch(request: Request, env: unknown, ctx: ExecutionContext): Promise<Response> {
    if (new URL(request.url).pathname === "/malformed") {
      const wrong = { channels: { telegram: { outcome: "sent" } } };
      return Response.json(wrong, { headers: { "Retry-After": "1" } });
    }
    return items(request, env, ctx);
  },
};
