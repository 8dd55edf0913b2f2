// cron-fanout-handler: write the Worker that cron-fanout's `service` items run
// in. `handler(fn)` turns `async (item, ctx) => outcome` into a Worker's `fetch`:
// it checks the request is a delivery, hands `fn` its fields, and answers what
// cron-fanout reads (docs/guides/own-worker.md). No runtime
// dependency: the protocol is small enough to spell out here.

/** Most channels one item has, over all its attempts. */
export const MAX_CHANNELS = 8;
/** Longest channel name, in characters (code points). */
export const MAX_CHANNEL_NAME_CHARS = 64;
/** Longest reason cron-fanout takes for a channel, in bytes of UTF-8. */
export const MAX_REASON_BYTES = 200;
/** Largest request body read: cron-fanout's payloads are at most 100 KiB. */
export const MAX_DELIVERY_BYTES = 1024 * 1024;
/** The header that marks a call of `POST /probe` mode `service`: no item. */
export const PROBE_HEADER = "Fanout-Probe";

/** The JSON body cron-fanout POSTs for one attempt of a `service` item. */
export interface Delivery<Data = unknown> {
  /** The item's id, the same on every attempt. */
  item_id: number;
  batch_id: string;
  subject_id: string;
  /** This attempt, 1-based: the last one is `max_attempts`. */
  attempt: number;
  max_attempts: number;
  /** The channels earlier attempts delivered, in name order (`[]` at first). */
  delivered: string[];
  /** The payload's `data` (`null` when it has none). */
  data: Data;
}

/** What `fn` gets: the delivery's fields and its `Idempotency-Key` header. */
export interface Item<Data = unknown> extends Readonly<Omit<Delivery<Data>, "delivered">> {
  readonly delivered: readonly string[];
  /** The same on every attempt of the item: do the work once per key. */
  readonly idempotency_key: string;
}

/** The item, or one channel, got through. */
export interface Done {
  readonly outcome: "done";
}

/** A transient failure: tried again by the next attempt. */
export interface Retry {
  readonly outcome: "retry";
  readonly reason: string;
  /**
   * Wait this long before the next attempt instead of cron-fanout's backoff:
   * this item's own delay (it spends an attempt), never a pause of the binding.
   */
  readonly afterSeconds?: number;
}

/**
 * The binding's "slow down": every item sent to this handler waits
 * `afterSeconds` (cron-fanout pauses `service:<binding>`), and this item's
 * attempt is given back. Only `fn`'s own outcome, never a channel's.
 */
export interface SlowDown {
  readonly outcome: "slow_down";
  readonly afterSeconds: number;
}

/** A permanent failure: the item ends `failed`. */
export interface Fail {
  readonly outcome: "fail";
  readonly reason: string;
}

export type Outcome = Done | Retry | Fail;

/** What `fn` may return: an outcome, or the binding's slow-down. */
export type ItemOutcome = Outcome | SlowDown;

/** One channel as an answer reports it (`reason` at most 200 bytes). */
export type ChannelOutcome =
  | { outcome: "done" }
  | { outcome: "retry"; reason: string; after_seconds?: number }
  | { outcome: "fail"; reason: string };

/**
 * The answer's JSON body when it says more than its status: channels reported,
 * the item's own delay, or the binding's slow-down.
 */
export interface ProtocolAnswer {
  channels?: Record<string, ChannelOutcome>;
  /** The item's own delay (a retry's `afterSeconds`). */
  after_seconds?: number;
  /** The binding's slow-down (`slowDown`). */
  slow_down?: { after_seconds: number };
}

/** The answer's JSON body when channels were reported. */
export type ChannelsAnswer = ProtocolAnswer & { channels: Record<string, ChannelOutcome> };

const DONE: Done = Object.freeze({ outcome: "done" });

/** The item (or the channel) got through. */
export function done(): Done {
  return DONE;
}

/**
 * Try again later: `reason` says why. `afterSeconds` asks for the next attempt
 * that much later (cron-fanout caps it at its retry cap): the item's (or the
 * channel's) own delay, which delays nothing else sent to this handler.
 */
export function retry(reason: string, options: { afterSeconds?: number } = {}): Retry {
  const { afterSeconds } = options;
  if (afterSeconds === undefined) {
    return Object.freeze({ outcome: "retry", reason: String(reason) });
  }
  return Object.freeze({ outcome: "retry", reason: String(reason), afterSeconds: seconds(afterSeconds) });
}

/**
 * Ask cron-fanout to slow down for this whole handler: no item sent to it
 * (`service:<binding>`) starts for `afterSeconds`, and this item is tried again
 * then without spending an attempt. For a limit the handler shares across
 * items (an API quota it calls with one token); a delay of one item is
 * `retry(reason, { afterSeconds })`.
 */
export function slowDown(options: { afterSeconds: number }): SlowDown {
  return Object.freeze({ outcome: "slow_down", afterSeconds: seconds(options?.afterSeconds) });
}

/** A delay as given, or a RangeError: a number of seconds ≥ 0. */
function seconds(afterSeconds: unknown): number {
  if (typeof afterSeconds !== "number" || !Number.isFinite(afterSeconds) || afterSeconds < 0) {
    throw new RangeError(`afterSeconds must be a number of seconds ≥ 0, got ${String(afterSeconds)}`);
  }
  return afterSeconds;
}

/** Give up for good: the item (or the channel) fails with `reason`. */
export function fail(reason: string): Fail {
  return Object.freeze({ outcome: "fail", reason: String(reason) });
}

/** Longest wait `waitSeconds` gives: a week, as cron-fanout's own reader. */
export const MAX_WAIT_SECONDS = 7 * 86_400;

/**
 * How long an API's answer asks to wait, in seconds, read as cron-fanout reads
 * its receivers' answers (docs/guides/flow-control.md, "The receiver's word"),
 * the first that names one: `Retry-After` (seconds, or an HTTP-date measured
 * against the answer's own `Date`), `retry-after-ms`, `X-RateLimit-Reset-After`,
 * `X-RateLimit-Reset` (epoch seconds past 10^9, against `Date`; else seconds),
 * then a JSON body's `retry_after` or `parameters.retry_after`. `undefined` when
 * none does; a value that does not parse is as if absent; at most a week.
 */
export function waitSeconds(
  answer: { headers: Headers; body?: string },
  nowMs: number = Date.now(),
): number | undefined {
  const header = (name: string) => answer.headers.get(name)?.trim() ?? "";
  const decimal = (text: string) => (/^\d+(\.\d+)?$|^\d*\.\d+$/.test(text) ? Number(text) : undefined);
  const date = Date.parse(header("Date"));
  const senderNow = Number.isFinite(date) ? date : nowMs;
  const until = (atMs: number) => Math.max(0, atMs - senderNow) / 1000;
  const retryAfter = header("Retry-After");
  const retryAfterDate = /[a-z]/i.test(retryAfter) ? Date.parse(retryAfter) : Number.NaN;
  const reset = decimal(header("X-RateLimit-Reset"));
  const body = (): number | undefined => {
    try {
      const b = JSON.parse(answer.body ?? "") as { retry_after?: unknown; parameters?: { retry_after?: unknown } };
      const said = b?.retry_after ?? b?.parameters?.retry_after;
      return typeof said === "number" && said >= 0 ? said : undefined;
    } catch {
      return undefined;
    }
  };
  const ms = decimal(header("retry-after-ms"));
  const wait =
    decimal(retryAfter) ??
    (Number.isFinite(retryAfterDate) ? until(retryAfterDate) : undefined) ??
    (ms === undefined ? undefined : ms / 1000) ??
    decimal(header("X-RateLimit-Reset-After")) ??
    (reset === undefined ? undefined : reset > 1e9 ? until(reset * 1000) : reset) ??
    body();
  return wait === undefined ? undefined : Math.min(wait, MAX_WAIT_SECONDS);
}

/** What `fn` may use besides the item. */
export interface Context<Env = unknown> {
  /** Whether an earlier attempt delivered `name`: then do not send it again. */
  delivered(name: string): boolean;
  /** Report what this attempt did on channel `name`; the last report wins. */
  channel(name: string, outcome: Outcome): void;
  /** The Worker's environment (secrets, bindings). */
  readonly env: Env;
  /** The request as it came. */
  readonly request: Request;
  /** Keep work going after the answer (the runtime's `ctx.waitUntil`). */
  waitUntil(promise: Promise<unknown>): void;
}

export type HandlerFn<Data = unknown, Env = unknown> = (
  item: Item<Data>,
  ctx: Context<Env>,
) => Promise<ItemOutcome> | ItemOutcome;

/** A Worker's `fetch`. */
export type Fetch<Env = unknown> = (
  request: Request,
  env: Env,
  ctx?: { waitUntil(promise: Promise<unknown>): void },
) => Promise<Response>;

/**
 * A Worker's `fetch` that answers cron-fanout's `service` calls with `fn`'s
 * outcome. A probe's call (`Fanout-Probe: 1`: `POST /probe` timing the path,
 * item id below 1) is answered 200 and `fn` is not called, nor is it for a
 * request that is not a well-formed delivery, answered 400. The outcome is a
 * status: done 200, retry 503, fail 422 (with the reason as text), slowDown 429.
 * What more it says is JSON (docs/schemas/service-answer.schema.json): the
 * channels reported (`{"channels": {…}}`: cron-fanout records each and sends
 * only the others next time), a retry's `after_seconds` (the item's or a
 * channel's own delay), a `slow_down` for the whole binding. If `fn` throws
 * after reporting a channel, the answer is a 500 with the channels (nothing
 * delivered is lost); before, the exception is the runtime's.
 */
export function handler<Data = unknown, Env = unknown>(fn: HandlerFn<Data, Env>): Fetch<Env> {
  return async (request, env, executionCtx) => {
    if (request.headers.get(PROBE_HEADER) === "1") {
      await request.body?.cancel();
      return new Response("probe: nothing done", { status: 200 });
    }
    const parsed = await readDelivery(request);
    if (typeof parsed === "string") {
      return json(400, { error: "invalid_delivery", message: parsed });
    }
    const item = parsed as Item<Data>;
    const channels = new Map<string, Outcome>();
    const known = new Set(item.delivered);
    const ctx: Context<Env> = {
      delivered: (name) => item.delivered.includes(name),
      channel: (name, outcome) => {
        checkChannelName(name);
        checkOutcome(outcome);
        if (!known.has(name) && known.size >= MAX_CHANNELS) {
          throw new RangeError(`an item has at most ${MAX_CHANNELS} channels: ${JSON.stringify(name)} would be one more`);
        }
        known.add(name);
        channels.set(name, outcome);
      },
      env,
      request,
      waitUntil: (promise) => {
        if (executionCtx) executionCtx.waitUntil(promise);
      },
    };
    let outcome: ItemOutcome;
    try {
      outcome = await fn(item, ctx);
      checkOutcome(outcome, true);
    } catch (error) {
      if (channels.size === 0) throw error;
      // What got through stays recorded; the item is tried again.
      console.error("service handler threw after reporting channels", error);
      return answer(retry("the handler threw"), channels, 500);
    }
    return answer(outcome, channels);
  };
}

/** The status of `outcome`: done 200, retry 503, fail 422, slow down 429. */
function statusOf(outcome: ItemOutcome): number {
  switch (outcome.outcome) {
    case "done":
      return 200;
    case "retry":
      return 503;
    case "fail":
      return 422;
    case "slow_down":
      return 429;
  }
}

/** The HTTP answer for `outcome` and the channels reported. */
function answer(outcome: ItemOutcome, channels: Map<string, Outcome>, status?: number): Response {
  const code = status ?? statusOf(outcome);
  const body: ProtocolAnswer = {};
  if (channels.size > 0) {
    body.channels = {};
    for (const [name, o] of channels) {
      body.channels[name] =
        o.outcome === "done"
          ? { outcome: "done" }
          : o.outcome === "retry" && o.afterSeconds !== undefined
            ? { outcome: "retry", reason: cutToBytes(o.reason, MAX_REASON_BYTES), after_seconds: o.afterSeconds }
            : { outcome: o.outcome, reason: cutToBytes(o.reason, MAX_REASON_BYTES) };
    }
  }
  if (outcome.outcome === "retry" && outcome.afterSeconds !== undefined) body.after_seconds = outcome.afterSeconds;
  if (outcome.outcome === "slow_down") body.slow_down = { after_seconds: outcome.afterSeconds };
  if (Object.keys(body).length === 0) {
    const text = outcome.outcome === "done" || outcome.outcome === "slow_down" ? outcome.outcome : outcome.reason;
    return new Response(text, { status: code, headers: { "Content-Type": "text/plain; charset=utf-8" } });
  }
  return json(code, body);
}

function json(status: number, body: unknown): Response {
  return new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });
}

/** The delivery in `request`, or why it is none. */
async function readDelivery(request: Request): Promise<Item | string> {
  if (request.method !== "POST") return `a delivery is a POST, got ${request.method}`;
  const key = request.headers.get("Idempotency-Key");
  if (key === null || key === "") return "the Idempotency-Key header is missing";
  const text = await readBounded(request, MAX_DELIVERY_BYTES);
  if (text === null) return `the body is larger than ${MAX_DELIVERY_BYTES} bytes`;
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return "the body is not JSON";
  }
  if (typeof body !== "object" || body === null || Array.isArray(body)) return "the body must be a JSON object";
  const b = body as Record<string, unknown>;
  const integer = (name: string, min: number): string | undefined => {
    const v = b[name];
    return typeof v === "number" && Number.isSafeInteger(v) && v >= min ? undefined : `${name} must be an integer ≥ ${min}`;
  };
  const text_ = (name: string): string | undefined => (typeof b[name] === "string" ? undefined : `${name} must be a string`);
  const problem =
    integer("item_id", 1) ??
    text_("batch_id") ??
    text_("subject_id") ??
    integer("attempt", 1) ??
    integer("max_attempts", 1) ??
    (Array.isArray(b.delivered) && b.delivered.every((d) => typeof d === "string") ? undefined : "delivered must be an array of channel names") ??
    ("data" in b ? undefined : "data is missing");
  if (problem !== undefined) return problem;
  return Object.freeze({
    item_id: b.item_id as number,
    batch_id: b.batch_id as string,
    subject_id: b.subject_id as string,
    attempt: b.attempt as number,
    max_attempts: b.max_attempts as number,
    delivered: Object.freeze([...(b.delivered as string[])]),
    data: b.data,
    idempotency_key: key,
  });
}

/** The body as text, or `null` past `max` bytes (read no further). */
async function readBounded(request: Request, max: number): Promise<string | null> {
  if (request.body === null) return "";
  const reader = request.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done: end, value } = await reader.read();
    if (end) break;
    size += value.byteLength;
    if (size > max) {
      await reader.cancel();
      return null;
    }
    chunks.push(value);
  }
  const all = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    all.set(c, at);
    at += c.byteLength;
  }
  return new TextDecoder().decode(all);
}

/** A channel's name as cron-fanout takes it: 1 to 64 characters, no control
 * characters, not "." or "..". A programming error otherwise. */
function checkChannelName(name: string): void {
  const chars = typeof name === "string" ? [...name].length : 0;
  if (chars === 0 || chars > MAX_CHANNEL_NAME_CHARS) {
    throw new RangeError(`a channel name must be 1 to ${MAX_CHANNEL_NAME_CHARS} characters, got ${JSON.stringify(name)}`);
  }
  // Unicode's control characters (Cc), as cron-fanout's id rules.
  if (/[\u0000-\u001f\u007f-\u009f]/.test(name) || name === "." || name === "..") {
    throw new RangeError(`a channel name must have no control characters and not be "." or "..", got ${JSON.stringify(name)}`);
  }
}

/** `outcome` is one `fn` (`ofItem`) or a channel may give; a TypeError otherwise. */
function checkOutcome(outcome: unknown, ofItem = false): asserts outcome is ItemOutcome {
  const o = outcome as { outcome?: unknown; reason?: unknown; afterSeconds?: unknown } | null;
  const named = typeof o === "object" && o !== null;
  const ok =
    named &&
    (o.outcome === "done" ||
      ((o.outcome === "retry" || o.outcome === "fail") && typeof o.reason === "string") ||
      (ofItem && o.outcome === "slow_down" && typeof o.afterSeconds === "number"));
  if (!ok) {
    const slow = ofItem ? ", slowDown({ afterSeconds })" : "";
    throw new TypeError(
      `an outcome is done(), retry(reason) or fail(reason)${slow}, got ${JSON.stringify(outcome)}`,
    );
  }
}

/** `text` cut to at most `max` bytes of UTF-8, on a character boundary. */
function cutToBytes(text: string, max: number): string {
  const encoder = new TextEncoder();
  if (encoder.encode(text).byteLength <= max) return text;
  let out = "";
  let size = 0;
  for (const ch of text) {
    const n = encoder.encode(ch).byteLength;
    if (size + n > max) break;
    out += ch;
    size += n;
  }
  return out;
}
