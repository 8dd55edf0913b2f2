// Each API's request and what its answers mean, as the Rust example's tests
// say them (examples/streak-reminder/src/{answers,github,notify,settings}.rs).
import { describe, expect, it } from "vitest";
import { type Answer, cut, readAnswer, retryAfterSeconds, scrub } from "../src/answers";
import { QUERY, calendarRequest, readCalendar } from "../src/github";
import {
  checkChat,
  discordRequest,
  message,
  readChannelAnswer,
  telegramRequest,
} from "../src/notify";
import { readSettings, secrets } from "../src/settings";

/** 2026-11-24T12:00:00Z. */
const NOW = 1_795_521_600_000;

function answer(status: number, headers: Record<string, string> = {}, body = ""): Answer {
  return { status, headers: new Headers(headers), body };
}

const ok = (body: unknown) => answer(200, {}, JSON.stringify(body));

function daysAnswer(weeks: unknown) {
  return { data: { user: { contributionsCollection: { contributionCalendar: { weeks } } } } };
}

describe("answers", () => {
  it("a retry's delay comes from the header or the body", () => {
    expect(retryAfterSeconds(answer(429, { "Retry-After": "7" }))).toBe(7);
    expect(retryAfterSeconds(answer(429, { "retry-after": "1.25" }))).toBe(1.25);
    const discord = '{"message": "You are being rate limited.", "retry_after": 0.5, "global": false}';
    expect(retryAfterSeconds(answer(429, {}, discord))).toBe(0.5);
    const telegram =
      '{"ok": false, "error_code": 429, "description": "Too Many Requests: retry after 12", "parameters": {"retry_after": 12}}';
    expect(retryAfterSeconds(answer(429, {}, telegram))).toBe(12);
    // A date is measured against the answer's own Date: the sender's clock.
    const dated = { Date: "Wed, 21 Oct 2026 07:28:00 GMT", "Retry-After": "Wed, 21 Oct 2026 07:28:30 GMT" };
    expect(retryAfterSeconds(answer(429, dated))).toBe(30);
    for (const none of [answer(429), answer(429, { "Retry-After": "-3" })]) {
      expect(retryAfterSeconds(none)).toBeUndefined();
    }
  });

  it("reasons are one cut line without secrets", () => {
    expect(cut(" a\nb ")).toBe("a b");
    expect(new TextEncoder().encode(cut("é".repeat(150))).byteLength).toBe(200);
    expect(scrub("fetch https://t.test/bot123:abc/sendMessage failed", ["123:abc", ""])).toBe(
      "fetch https://t.test/bot[redacted]/sendMessage failed",
    );
  });

  it("an answer is read up to its bound, no further", async () => {
    const read = await readAnswer(new Response("x".repeat(100_000)), 1_000);
    expect(read.body).toHaveLength(1_000);
    expect((await readAnswer(new Response(null, { status: 204 }), 1_000)).body).toBe("");
  });
});

describe("GitHub", () => {
  it("is asked for a year of calendar with the token and a user agent", () => {
    const r = calendarRequest("https://api.github.com", "ghp_secret", "octocat", NOW);
    const headers = new Headers(r.init.headers);
    expect([r.url, r.init.method, r.init.redirect]).toEqual([
      "https://api.github.com/graphql",
      "POST",
      "manual",
    ]);
    expect(headers.get("Authorization")).toBe("Bearer ghp_secret");
    expect(headers.get("User-Agent")).not.toBeNull();
    const body = JSON.parse(r.init.body as string);
    expect(body.query).toBe(QUERY);
    expect(body.variables).toEqual({
      login: "octocat",
      from: "2025-11-25T12:00:00.000Z",
      to: "2026-11-24T12:00:00.000Z",
    });
    // The token is in the header only.
    expect(r.init.body).not.toContain("ghp_secret");
  });

  it("answers with the calendar's weeks as days", () => {
    const weeks = [
      { contributionDays: [{ date: "2026-11-22", contributionCount: 0 }, { date: "2026-11-23", contributionCount: 3 }] },
      { contributionDays: [{ date: "2026-11-24", contributionCount: 1 }] },
    ];
    expect(readCalendar(ok(daysAnswer(weeks)), "octocat", NOW)).toEqual([
      { date: "2026-11-22", count: 0 },
      { date: "2026-11-23", count: 3 },
      { date: "2026-11-24", count: 1 },
    ]);
    expect(readCalendar(ok(daysAnswer([])), "octocat", NOW)).toEqual([]);
  });

  it("fails an unknown login for good", () => {
    const missing = {
      data: { user: null },
      errors: [{ type: "NOT_FOUND", message: "Could not resolve to a User with the login of 'nobody'." }],
    };
    expect(readCalendar(ok(missing), "nobody", NOW)).toEqual({
      outcome: "fail",
      reason: 'GitHub user "nobody" not found',
    });
    const other = { data: null, errors: [{ message: "Something went wrong" }] };
    expect(readCalendar(ok(other), "x", NOW)).toEqual({ outcome: "fail", reason: "GitHub: Something went wrong" });
  });

  it("retries a 429 after its Retry-After, or with the backoff", () => {
    expect(readCalendar(answer(429, { "Retry-After": "30" }), "x", NOW)).toEqual({
      outcome: "retry",
      reason: "GitHub: HTTP 429: rate limited",
      afterSeconds: 30,
    });
    expect(readCalendar(answer(429), "x", NOW)).toEqual({ outcome: "retry", reason: "GitHub: HTTP 429" });
  });

  it("waits for the reset of a spent rate limit's 403, and fails another 403", () => {
    const reset = String(NOW / 1000 + 600);
    const spent = answer(403, { "x-ratelimit-remaining": "0", "x-ratelimit-reset": reset });
    expect(readCalendar(spent, "x", NOW)).toEqual({
      outcome: "retry",
      reason: "GitHub: HTTP 403: rate limited",
      afterSeconds: 600,
    });
    const refused = answer(403, { "x-ratelimit-remaining": "4999" }, "Resource not accessible");
    expect(readCalendar(refused, "x", NOW)).toEqual({
      outcome: "fail",
      reason: "GitHub: HTTP 403: Resource not accessible",
    });
  });

  it("retries a RATE_LIMITED GraphQL error", () => {
    const limited = { errors: [{ type: "RATE_LIMITED", message: "API rate limit exceeded" }] };
    expect(readCalendar(ok(limited), "x", NOW)).toEqual({ outcome: "retry", reason: "GitHub: rate limited" });
  });

  it("retries server errors and unreadable answers, fails a bad token", () => {
    expect(readCalendar(answer(502, {}, "bad gateway"), "x", NOW)).toEqual({
      outcome: "retry",
      reason: "GitHub: HTTP 502",
    });
    expect(readCalendar(answer(401, {}, '{"message":"Bad credentials"}'), "x", NOW)).toEqual({
      outcome: "fail",
      reason: 'GitHub: HTTP 401: {"message":"Bad credentials"}',
    });
    const unreadable = readCalendar(answer(200, {}, "<html>"), "x", NOW);
    expect(unreadable).toMatchObject({ outcome: "retry" });
    expect((unreadable as { reason: string }).reason).toMatch(/^GitHub: unreadable answer/);
    const badDay = daysAnswer([{ contributionDays: [{ date: "2026-13-01", contributionCount: 1 }] }]);
    expect(readCalendar(ok(badDay), "x", NOW)).toMatchObject({ outcome: "retry" });
  });
});

describe("the channels", () => {
  const s = { today: "2026-11-24", contributedToday: false, current: 12 };

  it("the reminder names the streak and the day", () => {
    expect(message("octocat", s)).toBe(
      "octocat: your GitHub streak of 12 days ends at midnight: no contribution yet today (2026-11-24).",
    );
    expect(message("octocat", { ...s, current: 1 })).toContain("of 1 day ends");
  });

  it("Discord gets the text with mentions off", () => {
    const r = discordRequest("https://discord.com/api/webhooks/1/tok", "hi @everyone");
    expect(r.url).toBe("https://discord.com/api/webhooks/1/tok");
    expect(JSON.parse(r.init.body as string)).toEqual({
      content: "hi @everyone",
      allowed_mentions: { parse: [] },
    });
  });

  it("Telegram gets sendMessage with the chat", () => {
    const r = telegramRequest("https://api.telegram.org", "123:abc", -100, "hi");
    expect(r.url).toBe("https://api.telegram.org/bot123:abc/sendMessage");
    expect(JSON.parse(r.init.body as string)).toEqual({ chat_id: -100, text: "hi" });
    expect(telegramRequest("https://t.test", "t", "@news", "hi").init.body).toContain('"chat_id":"@news"');
  });

  it("chat ids are numbers or channel names", () => {
    for (const good of [42, "-100123", "@my_channel"]) expect(checkChat(good), String(good)).toBeUndefined();
    for (const bad of ["", "@", "news", "@a b", "@x/../y", 1.5]) expect(checkChat(bad), String(bad)).toBeDefined();
  });

  it("answers map as a webhook's with the API's delay and words", () => {
    expect(readChannelAnswer(answer(204))).toEqual({ outcome: "done" });
    expect(readChannelAnswer(answer(429, {}, '{"retry_after": 2.5, "message": "rate limited"}'))).toEqual({
      outcome: "retry",
      reason: "HTTP 429",
      afterSeconds: 2.5,
    });
    expect(readChannelAnswer(answer(503, { "Retry-After": "4" }, "upstream"))).toEqual({
      outcome: "retry",
      reason: "HTTP 503",
      afterSeconds: 4,
    });
    const chat = '{"ok": false, "error_code": 400, "description": "Bad Request: chat not found"}';
    expect(readChannelAnswer(answer(400, {}, chat))).toEqual({
      outcome: "fail",
      reason: "HTTP 400: Bad Request: chat not found",
    });
    expect(readChannelAnswer(answer(404, {}, '{"message": "Unknown Webhook", "code": 10015}'))).toEqual({
      outcome: "fail",
      reason: "HTTP 404: Unknown Webhook",
    });
    expect(readChannelAnswer(answer(410, { "Retry-After": "9" }))).toEqual({ outcome: "fail", reason: "HTTP 410" });
  });
});

describe("settings", () => {
  it("only the GitHub token is required, and the URLs default to the real APIs", () => {
    expect(readSettings({ GITHUB_TOKEN: "ghp_secret" })).toEqual({
      githubApiUrl: "https://api.github.com",
      githubToken: "ghp_secret",
      telegramApiUrl: "https://api.telegram.org",
      telegramBotToken: undefined,
      discordApiUrl: "https://discord.com",
      channelDeadlineMs: 9500,
    });
    expect(readSettings({})).toBe("GITHUB_TOKEN is not set");
    expect(readSettings({ GITHUB_TOKEN: "  " })).toBe("GITHUB_TOKEN is not set");
  });

  it("base URLs lose a trailing slash and must be http(s)", () => {
    const s = readSettings({
      GITHUB_TOKEN: "t",
      GITHUB_API_URL: "http://127.0.0.1:9000/github/",
      TELEGRAM_API_URL: "http://127.0.0.1:9000/telegram",
    });
    expect(s).toMatchObject({
      githubApiUrl: "http://127.0.0.1:9000/github",
      telegramApiUrl: "http://127.0.0.1:9000/telegram",
    });
    for (const bad of ["ftp://x.test", "not a url", "https://x.test/?a=1"]) {
      expect(readSettings({ GITHUB_TOKEN: "t", GITHUB_API_URL: bad })).toBe(
        "GITHUB_API_URL must be an http(s) base URL without a query",
      );
    }
    expect(readSettings({ GITHUB_TOKEN: "t", CHANNEL_DEADLINE_MS: "soon" })).toMatch(/^CHANNEL_DEADLINE_MS/);
  });

  it("errors never show a token, and the secrets are both tokens", () => {
    const s = readSettings({ GITHUB_TOKEN: "ghp_secret", TELEGRAM_BOT_TOKEN: "123:bot-secret", GITHUB_API_URL: "x" });
    expect(s).not.toContain("ghp_secret");
    const good = readSettings({ GITHUB_TOKEN: "ghp_secret", TELEGRAM_BOT_TOKEN: "123:bot-secret" });
    expect(typeof good === "string" ? [] : secrets(good)).toEqual(["ghp_secret", "123:bot-secret"]);
  });
});
