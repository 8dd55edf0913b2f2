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
  /** Wait this long before the next attempt instead of cron-fanout's backoff. */
  readonly afterSeconds?: number;
}

/** A permanent failure: the item ends `failed`. */
export interface Fail {
  readonly outcome: "fail";
  readonly reason: string;
}

export type Outcome = Done | Retry | Fail;

/** One channel as an answer reports it (`reason` at most 200 bytes). */
export type ChannelOutcome =
  | { outcome: "done" }
  | { outcome: "retry" | "fail"; reason: string };

/** The answer's JSON body when channels were reported. */
export interface ChannelsAnswer {
  channels: Record<string, ChannelOutcome>;
}

const DONE: Done = Object.freeze({ outcome: "done" });

/** The item (or the channel) got through. */
export function done(): Done {
  return DONE;
}

/**
 * Try again later: `reason` says why. `afterSeconds` asks for the next attempt
 * that much later (`Retry-After`; cron-fanout caps it at its retry cap).
 */
export function retry(reason: string, options: { afterSeconds?: number } = {}): Retry {
  const { afterSeconds } = options;
  if (afterSeconds === undefined) {
    return Object.freeze({ outcome: "retry", reason: String(reason) });
  }
  if (typeof afterSeconds !== "number" || !Number.isFinite(afterSeconds) || afterSeconds < 0) {
    throw new RangeError(`afterSeconds must be a number of seconds ≥ 0, got ${String(afterSeconds)}`);
  }
  return Object.freeze({ outcome: "retry", reason: String(reason), afterSeconds });
}

/** Give up for good: the item (or the channel) fails with `reason`. */
export function fail(reason: string): Fail {
  return Object.freeze({ outcome: "fail", reason: String(reason) });
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
) => Promise<Outcome> | Outcome;

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
 * request that is not a well-formed delivery, answered 400. Without channels the outcome is a status: done 200, retry 503
 * (429 with `Retry-After` when it has `afterSeconds`), fail 422 with the reason
 * as text. With channels reported, the same status with their JSON
 * (`{"channels": {…}}`): cron-fanout records each and sends only the others next
 * time. If `fn` throws after reporting a channel, the answer is a 500 with the
 * channels (nothing delivered is lost); before, the exception is the runtime's.
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
    let outcome: Outcome;
    try {
      outcome = await fn(item, ctx);
      checkOutcome(outcome);
    } catch (error) {
      if (channels.size === 0) throw error;
      // What got through stays recorded; the item is tried again.
      console.error("service handler threw after reporting channels", error);
      return answer(retry("the handler threw"), channels, 500);
    }
    return answer(outcome, channels);
  };
}

/** The status of `outcome`: done 200, retry 503 (429 when it says when), fail 422. */
function statusOf(outcome: Outcome): number {
  switch (outcome.outcome) {
    case "done":
      return 200;
    case "retry":
      return outcome.afterSeconds === undefined ? 503 : 429;
    case "fail":
      return 422;
  }
}

/** The HTTP answer for `outcome` and the channels reported. */
function answer(outcome: Outcome, channels: Map<string, Outcome>, status?: number): Response {
  const headers = new Headers();
  // One delay for the item: the longest any retry asked for.
  const delays = [outcome, ...channels.values()].flatMap((o) =>
    o.outcome === "retry" && o.afterSeconds !== undefined ? [Math.ceil(o.afterSeconds)] : [],
  );
  if (delays.length > 0) headers.set("Retry-After", String(Math.max(...delays)));
  const code = status ?? statusOf(outcome);
  if (channels.size === 0) {
    headers.set("Content-Type", "text/plain; charset=utf-8");
    const text = outcome.outcome === "done" ? "done" : outcome.reason;
    return new Response(text, { status: code, headers });
  }
  const body: ChannelsAnswer = { channels: {} };
  for (const [name, o] of channels) {
    body.channels[name] =
      o.outcome === "done"
        ? { outcome: "done" }
        : { outcome: o.outcome, reason: cutToBytes(o.reason, MAX_REASON_BYTES) };
  }
  headers.set("Content-Type", "application/json");
  return new Response(JSON.stringify(body), { status: code, headers });
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

function checkOutcome(outcome: unknown): asserts outcome is Outcome {
  const o = outcome as { outcome?: unknown; reason?: unknown } | null;
  const named = typeof o === "object" && o !== null;
  const ok =
    named &&
    (o.outcome === "done" ||
      ((o.outcome === "retry" || o.outcome === "fail") && typeof o.reason === "string"));
  if (!ok) {
    throw new TypeError(
      `an outcome is done(), retry(reason) or fail(reason), got ${JSON.stringify(outcome)}`,
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
