// One user's check through an in-memory `Outside` (scripted answers, every
// request recorded): what it asks GitHub, whom it reminds and when, and what
// each answer becomes, as the Rust example's kind tests say it
// (examples/streak-reminder/tests/streak_check.rs).
import type { Outcome } from "cron-fanout-handler";
import { describe, expect, it } from "vitest";
import { type Outside, checkStreak } from "../src/check";
import worker from "../src/index";
import { type Settings, readSettings } from "../src/settings";

const GITHUB = "https://github.test/graphql";
const DISCORD = "https://discord.test/api/webhooks/1/discord-token";
const TELEGRAM = "https://telegram.test/bot123:bot-secret/sendMessage";
const GITHUB_TOKEN = "ghp_secret_token";
/** 2026-11-24T17:00:00Z: 18:00 in Berlin. */
const NOW = 1_795_539_600_000;

const ENV = {
  GITHUB_API_URL: "https://github.test",
  GITHUB_TOKEN,
  TELEGRAM_API_URL: "https://telegram.test",
  TELEGRAM_BOT_TOKEN: "123:bot-secret",
  DISCORD_API_URL: "https://discord.test",
  CHANNEL_DEADLINE_MS: "9500",
};

function settings(env: Record<string, string> = ENV): Settings {
  const s = readSettings(env);
  if (typeof s === "string") throw new Error(s);
  return s;
}

function user(zone: string): Record<string, unknown> {
  return { github_login: "ada", timezone: zone, discord_webhook_url: DISCORD, telegram_chat_id: 4242 };
}

type Scripted = Response | "hang" | Error;

/** Answers scripted per URL (each used once), every request recorded. */
class Fakes implements Outside {
  sent: { url: string; init: RequestInit }[] = [];
  private script = new Map<string, Scripted[]>();
  constructor(private clock = NOW) {}
  answer(url: string, ...answers: Scripted[]): this {
    this.script.set(url, [...(this.script.get(url) ?? []), ...answers]);
    return this;
  }
  now(): number {
    return this.clock;
  }
  async fetch(url: string, init: RequestInit): Promise<Response> {
    this.sent.push({ url, init });
    const next = this.script.get(url)?.shift();
    if (next === undefined) throw new Error(`no answer scripted for ${url}`);
    if (next instanceof Error) throw next;
    if (next === "hang") {
      return new Promise((_, reject) =>
        init.signal?.addEventListener("abort", () => reject(new Error("aborted"))),
      );
    }
    return next;
  }
  urls(): string[] {
    return this.sent.map((s) => s.url);
  }
  body(url: string): Record<string, unknown> {
    return JSON.parse(this.sent.find((s) => s.url === url)?.init.body as string);
  }
}

/** The channels' side of a handler's ctx, with what earlier attempts delivered. */
function channels(delivered: string[] = []) {
  const reported = new Map<string, Outcome>();
  return {
    reported,
    delivered: (name: string) => delivered.includes(name),
    channel: (name: string, outcome: Outcome) => void reported.set(name, outcome),
  };
}

function calendar(days: [string, number][]): Response {
  const contributionDays = days.map(([date, contributionCount]) => ({ date, contributionCount }));
  return Response.json({
    data: { user: { contributionsCollection: { contributionCalendar: { weeks: [{ contributionDays }] } } } },
  });
}

/** A streak of two days that ends unless Ada contributes today (the 24th). */
const atRisk = () => calendar([["2026-11-22", 1], ["2026-11-23", 2], ["2026-11-24", 0]]);
const text = "ada: your GitHub streak of 2 days ends at midnight: no contribution yet today (2026-11-24).";

describe("a check", () => {
  it("at risk reminds Discord and Telegram once each", async () => {
    const out = new Fakes()
      .answer(GITHUB, atRisk())
      .answer(DISCORD, new Response(null, { status: 204 }))
      .answer(TELEGRAM, Response.json({ ok: true }));
    const ctx = channels();
    expect(await checkStreak(user("Europe/Berlin"), ctx, settings(), out)).toEqual({ outcome: "done" });
    expect(Object.fromEntries(ctx.reported)).toEqual({ discord: { outcome: "done" }, telegram: { outcome: "done" } });
    expect(out.urls()).toEqual([GITHUB, DISCORD, TELEGRAM]);
    expect(new Headers(out.sent[0]?.init.headers).get("Authorization")).toBe(`Bearer ${GITHUB_TOKEN}`);
    expect((out.body(GITHUB).variables as { login: string }).login).toBe("ada");
    expect(out.body(DISCORD).content).toBe(text);
    expect(out.body(TELEGRAM)).toEqual({ chat_id: 4242, text });
    // The GitHub token goes to GitHub only.
    for (const s of out.sent.slice(1)) expect(JSON.stringify(s)).not.toContain(GITHUB_TOKEN);
  });

  it("leaves alone a user who contributed today or has no streak", async () => {
    for (const days of [
      [["2026-11-23", 2], ["2026-11-24", 1]], // safe: contributed today
      [["2026-11-22", 5], ["2026-11-23", 0], ["2026-11-24", 0]], // broken yesterday
      [], // an empty calendar
    ] as [string, number][][]) {
      const out = new Fakes().answer(GITHUB, calendar(days));
      const ctx = channels();
      expect(await checkStreak(user("Europe/Berlin"), ctx, settings(), out)).toEqual({ outcome: "done" });
      expect([ctx.reported.size, out.urls()]).toEqual([0, [GITHUB]]);
    }
  });

  it("takes today as the user's own date", async () => {
    // 23:30 UTC on the 24th: the 25th in Berlin (nothing yet: at risk), still
    // the 24th in New York (a contribution that day: safe).
    const late = NOW + 6 * 3_600_000 + 1_800_000;
    const days: [string, number][] = [["2026-11-23", 1], ["2026-11-24", 3]];
    const berlin = new Fakes(late)
      .answer(GITHUB, calendar(days))
      .answer(DISCORD, new Response(null, { status: 204 }))
      .answer(TELEGRAM, Response.json({ ok: true }));
    await checkStreak(user("Europe/Berlin"), channels(), settings(), berlin);
    expect(berlin.body(DISCORD).content).toContain("streak of 2 days");
    expect(berlin.body(DISCORD).content).toContain("(2026-11-25)");
    const ny = new Fakes(late).answer(GITHUB, calendar(days));
    await checkStreak(user("America/New_York"), channels(), settings(), ny);
    expect(ny.urls()).toEqual([GITHUB]);
  });

  it("retries a Discord 5xx, and the retry resends only Discord", async () => {
    const first = new Fakes()
      .answer(GITHUB, atRisk())
      .answer(DISCORD, new Response("upstream", { status: 503 }))
      .answer(TELEGRAM, Response.json({ ok: true }));
    const ctx = channels();
    await checkStreak(user("Europe/Berlin"), ctx, settings(), first);
    expect(Object.fromEntries(ctx.reported)).toEqual({
      discord: { outcome: "retry", reason: "HTTP 503" },
      telegram: { outcome: "done" },
    });
    // The next attempt's delivery says Telegram got through.
    const second = new Fakes(NOW + 60_000).answer(GITHUB, atRisk()).answer(DISCORD, new Response(null, { status: 204 }));
    const again = channels(["telegram"]);
    await checkStreak(user("Europe/Berlin"), again, settings(), second);
    expect(second.urls()).toEqual([GITHUB, DISCORD]);
    expect([...again.reported.keys()]).toEqual(["discord"]);
  });

  it("asks nobody when every channel was delivered", async () => {
    const out = new Fakes();
    const ctx = channels(["discord", "telegram"]);
    expect(await checkStreak(user("Europe/Berlin"), ctx, settings(), out)).toEqual({ outcome: "done" });
    expect([out.sent.length, ctx.reported.size]).toEqual([0, 0]);
  });

  it("retries a GitHub 429 after its Retry-After, and reminds nobody", async () => {
    const out = new Fakes().answer(GITHUB, new Response("", { status: 429, headers: { "Retry-After": "120" } }));
    const ctx = channels();
    expect(await checkStreak(user("Europe/Berlin"), ctx, settings(), out)).toEqual({
      outcome: "retry",
      reason: "GitHub: HTTP 429: rate limited",
      afterSeconds: 120,
    });
    expect([ctx.reported.size, out.urls()]).toEqual([0, [GITHUB]]);
  });

  it("waits what Telegram asks on a 429, and a refused chat fails its channel", async () => {
    const limited =
      '{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 9","parameters":{"retry_after":9}}';
    const out = new Fakes()
      .answer(GITHUB, atRisk())
      .answer(DISCORD, new Response(null, { status: 204 }))
      .answer(TELEGRAM, new Response(limited, { status: 429 }));
    const ctx = channels();
    await checkStreak(user("Europe/Berlin"), ctx, settings(), out);
    expect(ctx.reported.get("telegram")).toEqual({ outcome: "retry", reason: "HTTP 429", afterSeconds: 9 });
    const refused = '{"ok":false,"error_code":400,"description":"Bad Request: chat not found"}';
    const out2 = new Fakes()
      .answer(GITHUB, atRisk())
      .answer(DISCORD, new Response(null, { status: 204 }))
      .answer(TELEGRAM, new Response(refused, { status: 400 }));
    const ctx2 = channels();
    await checkStreak(user("Europe/Berlin"), ctx2, settings(), out2);
    expect(Object.fromEntries(ctx2.reported)).toEqual({
      discord: { outcome: "done" },
      telegram: { outcome: "fail", reason: "HTTP 400: Bad Request: chat not found" },
    });
  });

  it("gives up a hanging channel at the deadline alone, and keeps the other", async () => {
    const out = new Fakes()
      .answer(GITHUB, atRisk())
      .answer(DISCORD, "hang")
      .answer(TELEGRAM, Response.json({ ok: true }));
    const ctx = channels();
    await checkStreak(user("Europe/Berlin"), ctx, settings({ ...ENV, CHANNEL_DEADLINE_MS: "50" }), out);
    expect(Object.fromEntries(ctx.reported)).toEqual({
      discord: { outcome: "retry", reason: "timed out after 50 ms" },
      telegram: { outcome: "done" },
    });
    expect(out.sent[1]?.init.signal?.aborted).toBe(true);
  });

  it("never lets a secret reach a reason", async () => {
    const out = new Fakes()
      .answer(GITHUB, atRisk())
      .answer(DISCORD, new Response(null, { status: 204 }))
      .answer(TELEGRAM, new Error("connection refused: https://telegram.test/bot123:bot-secret/sendMessage"));
    const ctx = channels();
    await checkStreak(user("Europe/Berlin"), ctx, settings(), out);
    const reason = JSON.stringify(Object.fromEntries(ctx.reported));
    expect(reason).not.toContain("bot-secret");
    expect(reason).toContain("bot[redacted]/sendMessage");
    const github = new Fakes().answer(GITHUB, new Error(`TLS error for token ${GITHUB_TOKEN}`));
    expect(await checkStreak(user("Europe/Berlin"), channels(), settings(), github)).toEqual({
      outcome: "retry",
      reason: "GitHub: Error: TLS error for token [redacted]",
    });
  });

  it("fails the Telegram channel without a bot token, and still reminds Discord", async () => {
    const { TELEGRAM_BOT_TOKEN: _, ...noBot } = ENV;
    const out = new Fakes().answer(GITHUB, atRisk()).answer(DISCORD, new Response(null, { status: 204 }));
    const ctx = channels();
    await checkStreak(user("Europe/Berlin"), ctx, settings(noBot), out);
    expect(ctx.reported.get("telegram")).toEqual({ outcome: "fail", reason: "not sent: TELEGRAM_BOT_TOKEN is not set" });
    expect(out.urls()).toEqual([GITHUB, DISCORD]);
  });

  it("fails a user that breaks a rule for good, naming the field, and sends nothing", async () => {
    for (const [data, says] of [
      [{ github_login: "", telegram_chat_id: 1 }, "github_login"],
      [{ github_login: "-x", telegram_chat_id: 1 }, "github_login"],
      [{ github_login: "a/b", telegram_chat_id: 1 }, "github_login"],
      [{ github_login: "x".repeat(40), telegram_chat_id: 1 }, "github_login"],
      [{ github_login: "a", timezone: "Mars/Olympus", telegram_chat_id: 1 }, "timezone"],
      [{ github_login: "a" }, "at least one channel"],
      [{ github_login: "a", telegram_chat_id: "news" }, "telegram_chat_id"],
      [{ github_login: "a", discord_webhook_url: "http://127.0.0.1/x" }, "discord_webhook_url"],
      [{ github_login: "a", discord_webhook_url: "https://discord.test/api/webhooks/1/t?x=1" }, "discord_webhook_url"],
      [{ github_login: "a", telegram_chat_id: 1, email: "x" }, "unknown field"],
      [null, "data must be an object"],
    ] as [unknown, string][]) {
      const out = new Fakes();
      const got = await checkStreak(data, channels(), settings(), out);
      expect(got.outcome, JSON.stringify(data)).toBe("fail");
      expect((got as { reason: string }).reason, JSON.stringify(data)).toMatch(new RegExp(`^not run: .*${says}`));
      expect(out.sent).toEqual([]);
    }
  });
});

describe("the Worker", () => {
  const deliver = (data: unknown) =>
    new Request("https://cron-fanout.internal/", {
      method: "POST",
      headers: { "Content-Type": "application/json", "Idempotency-Key": "7" },
      body: JSON.stringify({
        item_id: 7,
        batch_id: "streaks:2026-11-24",
        subject_id: "ada",
        attempt: 1,
        max_attempts: 3,
        delivered: [],
        data,
      }),
    });

  it("answers a user that breaks a rule 422 with the rule, for cron-fanout's last_error", async () => {
    const got = await worker.fetch(deliver({ github_login: "ada" }), ENV);
    expect([got.status, await got.text()]).toEqual([
      422,
      "not run: give at least one channel: discord_webhook_url or telegram_chat_id",
    ]);
  });

  it("answers a missing setting 422 with the setting named", async () => {
    const got = await worker.fetch(deliver(user("UTC")), {});
    expect([got.status, await got.text()]).toEqual([422, "not run: GITHUB_TOKEN is not set"]);
  });

  it("answers what is no delivery 400", async () => {
    const got = await worker.fetch(new Request("https://cron-fanout.internal/", { method: "POST", body: "{}" }), ENV);
    expect(got.status).toBe(400);
  });
});
