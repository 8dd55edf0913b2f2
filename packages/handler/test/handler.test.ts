// The handler inside workerd: what reaches `fn`, what is refused, and what each
// outcome answers (docs/guides/own-worker.md, "The protocol"; docs/schemas/).
import { describe, expect, it, vi } from "vitest";
import answerSchema from "../../../docs/schemas/service-answer.schema.json";
import requestSchema from "../../../docs/schemas/service-request.schema.json";
import {
  type Item,
  type Outcome,
  type ItemOutcome,
  done,
  fail,
  handler,
  MAX_CHANNEL_NAME_CHARS,
  MAX_CHANNELS,
  MAX_REASON_BYTES,
  retry,
  slowDown,
  waitSeconds,
} from "../src/index";

const DELIVERY = {
  item_id: 42,
  batch_id: "b1",
  subject_id: "ada",
  attempt: 2,
  max_attempts: 5,
  delivered: ["discord"],
  data: { login: "ada" },
};

function deliver(body: unknown = DELIVERY, init: RequestInit = {}): Request {
  return new Request("https://cron-fanout.internal/streak", {
    method: "POST",
    headers: { "Content-Type": "application/json", "Idempotency-Key": "42" },
    body: typeof body === "string" ? body : JSON.stringify(body),
    ...init,
  });
}

/** Runs `fn` as the handler of one delivery. */
async function answer(fn: (item: Item, ctx: Parameters<Parameters<typeof handler>[0]>[1]) => Promise<ItemOutcome> | ItemOutcome, request = deliver()) {
  const response = await handler(fn)(request, {});
  return { status: response.status, retryAfter: response.headers.get("Retry-After"), text: await response.text(), type: response.headers.get("Content-Type") };
}

it("runs inside workerd", () => {
  expect(navigator.userAgent).toBe("Cloudflare-Workers");
});

describe("a delivery", () => {
  it("reaches fn as typed fields with the idempotency key", async () => {
    let seen: Item | undefined;
    await answer((item) => {
      seen = item;
      return done();
    });
    expect(seen).toEqual({ ...DELIVERY, idempotency_key: "42" });
    // Every field the request schema names, and the key.
    expect(Object.keys(seen!).sort()).toEqual([...requestSchema.required, "idempotency_key"].sort());
  });

  it("tells fn which channels earlier attempts delivered", async () => {
    const seen: boolean[] = [];
    await answer((_, ctx) => {
      seen.push(ctx.delivered("discord"), ctx.delivered("telegram"));
      return done();
    });
    expect(seen).toEqual([true, false]);
  });

  it("keeps fields it does not know out of the item", async () => {
    let seen: Item | undefined;
    await answer((item) => {
      seen = item;
      return done();
    }, deliver({ ...DELIVERY, later: 1 }));
    expect(seen).not.toHaveProperty("later");
  });
});

describe("anything that is not a well-formed delivery", () => {
  const { data: _, ...noData } = DELIVERY;
  const cases: [string, Request][] = [
    ["a GET", new Request("https://cron-fanout.internal/", { method: "GET", headers: { "Idempotency-Key": "42" } })],
    ["no Idempotency-Key", deliver(DELIVERY, { headers: { "Content-Type": "application/json" } })],
    ["no JSON", deliver("{not json")],
    ["an array", deliver([DELIVERY])],
    ["no data", deliver(noData)],
    ["item_id as text", deliver({ ...DELIVERY, item_id: "42" })],
    ["a fractional item_id", deliver({ ...DELIVERY, item_id: 4.2 })],
    ["attempt 0", deliver({ ...DELIVERY, attempt: 0 })],
    ["no max_attempts", deliver({ ...DELIVERY, max_attempts: undefined })],
    ["delivered of numbers", deliver({ ...DELIVERY, delivered: [1] })],
    ["a batch_id that is no string", deliver({ ...DELIVERY, batch_id: null })],
    ["a body over 1 MiB", deliver(JSON.stringify({ ...DELIVERY, data: "x".repeat(1024 * 1024) }))],
  ];
  for (const [what, request] of cases) {
    it(`is answered 400 without calling fn: ${what}`, async () => {
      let called = false;
      const got = await answer(() => {
        called = true;
        return done();
      }, request);
      expect(got.status).toBe(400);
      expect(JSON.parse(got.text).error).toBe("invalid_delivery");
      expect(called).toBe(false);
    });
  }
});

describe("a probe's call", () => {
  // What cron-fanout sends for call 3 of `POST /probe` mode `service`.
  const probe = () =>
    deliver(
      { ...DELIVERY, item_id: -3, batch_id: "probe", subject_id: "probe-3", attempt: 1, max_attempts: 1, delivered: [], data: null },
      { headers: { "Content-Type": "application/json", "Idempotency-Key": "probe:3", "Fanout-Probe": "1" } },
    );

  it("is answered 200 without calling fn, so no work is done and no key kept", async () => {
    let called = false;
    const got = await answer(() => {
      called = true;
      return fail("a probe must not reach fn");
    }, probe());
    expect(got.status).toBe(200);
    expect(called).toBe(false);
  });

  it("is told by its header only: an item id below 1 without it is no delivery", async () => {
    const got = await answer(() => done(), deliver({ ...DELIVERY, item_id: -3 }));
    expect(got.status).toBe(400);
  });
});

describe("an outcome without channels is a status", () => {
  it("done is 200", async () => {
    expect((await answer(() => done())).status).toBe(200);
  });

  it("retry is 503, without the reason in last_error (cron-fanout keeps HTTP 503)", async () => {
    const got = await answer(() => retry("warming up"));
    expect([got.status, got.retryAfter]).toEqual([503, null]);
  });

  it("retry with afterSeconds is 503 with the item's own after_seconds, no Retry-After (no refusal of the binding)", async () => {
    const got = await answer(async () => retry("not yet", { afterSeconds: 1.5 }));
    expect([got.status, got.retryAfter, got.type]).toEqual([503, null, "application/json"]);
    expect(JSON.parse(got.text)).toEqual({ after_seconds: 1.5 });
  });

  it("slowDown is 429 with slow_down for the whole binding", async () => {
    const got = await answer(() => slowDown({ afterSeconds: 30 }));
    expect([got.status, got.retryAfter]).toEqual([429, null]);
    expect(JSON.parse(got.text)).toEqual({ slow_down: { after_seconds: 30 } });
    expect(() => slowDown({ afterSeconds: -1 })).toThrow(RangeError);
  });

  it("slowDown is fn's own outcome, never a channel's", async () => {
    await expect(
      answer((_, ctx) => {
        ctx.channel("discord", slowDown({ afterSeconds: 1 }) as unknown as Outcome);
        return done();
      }),
    ).rejects.toThrow(TypeError);
  });

  it("fail is 422 with the reason as its text", async () => {
    const got = await answer(() => fail("unknown login"));
    expect([got.status, got.text]).toEqual([422, "unknown login"]);
  });

  it("a negative or unknown afterSeconds is refused when written", () => {
    expect(() => retry("x", { afterSeconds: -1 })).toThrow(RangeError);
    expect(() => retry("x", { afterSeconds: Number.NaN })).toThrow(RangeError);
  });
});

describe("channels", () => {
  it("are answered 200 as JSON, each as reported", async () => {
    const got = await answer((_, ctx) => {
      ctx.channel("telegram", retry("HTTP 429"));
      ctx.channel("sms", fail("HTTP 400"));
      ctx.channel("email", done());
      return done();
    });
    expect([got.status, got.type]).toEqual([200, "application/json"]);
    expect(JSON.parse(got.text)).toEqual({
      channels: {
        telegram: { outcome: "retry", reason: "HTTP 429" },
        sms: { outcome: "fail", reason: "HTTP 400" },
        email: { outcome: "done" },
      },
    });
  });

  it("send only what was not delivered, as the README's handler does", async () => {
    const sent: string[] = [];
    const got = await answer((_, ctx) => {
      for (const name of ["discord", "telegram"]) {
        if (!ctx.delivered(name)) {
          sent.push(name);
          ctx.channel(name, done());
        }
      }
      return done();
    });
    expect(sent).toEqual(["telegram"]);
    expect(JSON.parse(got.text)).toEqual({ channels: { telegram: { outcome: "done" } } });
  });

  it("a channel's retry after some seconds carries its own after_seconds, no Retry-After", async () => {
    const got = await answer((_, ctx) => {
      ctx.channel("discord", retry("429", { afterSeconds: 3 }));
      ctx.channel("telegram", retry("429", { afterSeconds: 10 }));
      return done();
    });
    expect([got.status, got.retryAfter]).toEqual([200, null]);
    expect(JSON.parse(got.text)).toEqual({
      channels: {
        discord: { outcome: "retry", reason: "429", after_seconds: 3 },
        telegram: { outcome: "retry", reason: "429", after_seconds: 10 },
      },
    });
  });

  it("fn's own retry or failure beside them is their status", async () => {
    const retried = await answer((_, ctx) => {
      ctx.channel("telegram", done());
      return retry("GitHub 502");
    });
    expect(retried.status).toBe(503);
    expect(JSON.parse(retried.text)).toEqual({ channels: { telegram: { outcome: "done" } } });
    const failed = await answer((_, ctx) => {
      ctx.channel("telegram", done());
      return fail("gone");
    });
    expect(failed.status).toBe(422);
  });

  it("a reason is cut to 200 bytes on a character boundary", async () => {
    const got = await answer((_, ctx) => {
      ctx.channel("telegram", retry("é".repeat(150)));
      return done();
    });
    const reason: string = JSON.parse(got.text).channels.telegram.reason;
    expect(reason).toBe("é".repeat(100));
    expect(new TextEncoder().encode(reason).byteLength).toBe(MAX_REASON_BYTES);
  });

  it("a name cron-fanout would refuse is a programming error", async () => {
    for (const name of ["", ".", "..", "a\nb", "x".repeat(MAX_CHANNEL_NAME_CHARS + 1)]) {
      await expect(
        answer((_, ctx) => {
          ctx.channel(name, done());
          return done();
        }),
      ).rejects.toThrow(RangeError);
    }
    // 64 characters, four bytes each: a name.
    const got = await answer((_, ctx) => {
      ctx.channel("𝄞".repeat(MAX_CHANNEL_NAME_CHARS), done());
      return done();
    });
    expect(got.status).toBe(200);
  });

  it("at most 8 over all attempts, the delivered ones included", async () => {
    const logged = vi.spyOn(console, "error").mockImplementation(() => {});
    // One delivered before (discord) and 7 more: 8.
    const seven = await answer((_, ctx) => {
      for (let i = 0; i < MAX_CHANNELS - 1; i++) ctx.channel(`c${i}`, done());
      return done();
    });
    expect(seven.status).toBe(200);
    const got = await answer((_, ctx) => {
      for (let i = 0; i < MAX_CHANNELS - 1; i++) ctx.channel(`c${i}`, done());
      ctx.channel("one-more", done());
      return done();
    });
    // Thrown after channels were reported: they are answered, and the item retried.
    expect(got.status).toBe(500);
    expect(Object.keys(JSON.parse(got.text).channels)).toHaveLength(MAX_CHANNELS - 1);
    expect(logged).toHaveBeenCalledOnce();
    logged.mockRestore();
  });

  it("survive fn throwing after reporting them: 500, nothing delivered lost", async () => {
    const logged = vi.spyOn(console, "error").mockImplementation(() => {});
    const got = await answer((_, ctx) => {
      ctx.channel("telegram", done());
      throw new Error("boom");
    });
    expect(got.status).toBe(500);
    expect(JSON.parse(got.text)).toEqual({ channels: { telegram: { outcome: "done" } } });
    // Said in the Worker's log, since the answer cannot say it.
    expect(String(logged.mock.calls[0]?.[1])).toBe("Error: boom");
    logged.mockRestore();
  });

  it("an exception before any channel is the runtime's (cron-fanout retries it)", async () => {
    await expect(answer(() => Promise.reject(new Error("boom")))).rejects.toThrow("boom");
  });

  it("an answer keeps to the schema's bounds", () => {
    const channels = answerSchema.properties.channels;
    expect(channels.maxProperties).toBe(MAX_CHANNELS);
    expect(channels.propertyNames.maxLength).toBe(MAX_CHANNEL_NAME_CHARS);
    expect(answerSchema.$defs.outcome.oneOf[1]?.properties.reason?.maxLength).toBe(MAX_REASON_BYTES);
  });
});

describe("waitSeconds reads an API's wait as cron-fanout does", () => {
  const NOW = Date.parse("2026-10-21T07:28:00Z");
  const wait = (headers: Record<string, string>, body = "") => waitSeconds({ headers: new Headers(headers), body }, NOW);

  it("from Retry-After in seconds, or as a date against the answer's own Date", () => {
    expect(wait({ "Retry-After": "7" })).toBe(7);
    expect(wait({ "retry-after": "1.25" })).toBe(1.25);
    const dated = { Date: "Wed, 21 Oct 2026 07:27:00 GMT", "Retry-After": "Wed, 21 Oct 2026 07:27:30 GMT" };
    expect(wait(dated)).toBe(30);
  });

  it("from the other headers, then the body", () => {
    expect(wait({ "retry-after-ms": "1500" })).toBe(1.5);
    expect(wait({ "X-RateLimit-Reset-After": "0.5" })).toBe(0.5);
    expect(wait({ "x-ratelimit-reset": String(NOW / 1000 + 600) })).toBe(600);
    expect(wait({}, '{"retry_after": 0.5, "global": false}')).toBe(0.5);
    expect(wait({}, '{"ok": false, "parameters": {"retry_after": 12}}')).toBe(12);
  });

  it("ignores what does not parse, and caps at a week", () => {
    expect(wait({})).toBeUndefined();
    expect(wait({ "Retry-After": "-3" })).toBeUndefined();
    expect(wait({}, "not json")).toBeUndefined();
    expect(wait({ "Retry-After": "99999999" })).toBe(7 * 86_400);
  });
});
