// GitHub's GraphQL API, pure: the contribution-calendar request and what its
// answer means (the calendar's days, or an outcome: rate limits and 5xx are
// retried, a missing user or a refused token is not).
import { type Fail, type Retry, fail, retry } from "cron-fanout-handler";
import { type Answer, cut, retryAfterSeconds, statusMeans } from "./answers";
import { type Day, isDate } from "./streak";

/** The contribution calendar of one user between two instants (GitHub allows
 * at most a year between them). */
export const QUERY =
  "query($login: String!, $from: DateTime!, $to: DateTime!) { " +
  "user(login: $login) { contributionsCollection(from: $from, to: $to) { " +
  "contributionCalendar { weeks { contributionDays { date contributionCount } } } } } }";

/** How far back the calendar is read: a streak longer than this shows as this. */
export const CALENDAR_DAYS = 364;

/** The most of GitHub's answer read: a year of calendar is about 20 KB. */
export const MAX_ANSWER_BYTES = 1024 * 1024;

/** `POST {GITHUB_API_URL}/graphql` for `login`'s calendar up to `nowMs`. */
export function calendarRequest(
  apiUrl: string,
  token: string,
  login: string,
  nowMs: number,
): { url: string; init: RequestInit } {
  const to = new Date(nowMs);
  const from = new Date(nowMs - CALENDAR_DAYS * 86_400_000);
  const body = {
    query: QUERY,
    variables: { login, from: from.toISOString(), to: to.toISOString() },
  };
  return {
    url: `${apiUrl}/graphql`,
    init: {
      method: "POST",
      headers: {
        "Content-Type": "application/json",
        Authorization: `Bearer ${token}`,
        // GitHub refuses API requests without a User-Agent.
        "User-Agent": "cron-fanout-streak-reminder-ts",
      },
      body: JSON.stringify(body),
      redirect: "manual",
    },
  };
}

interface GraphqlAnswer {
  data?: {
    user?: {
      contributionsCollection?: {
        contributionCalendar?: {
          weeks?: { contributionDays?: { date?: unknown; contributionCount?: unknown }[] }[];
        };
      };
    } | null;
  } | null;
  errors?: { type?: string; message?: string }[];
}

/** What GitHub's answer means at `nowMs`: the calendar's days, or the item's
 * outcome. A rate limit (429, or a 403 with `Retry-After` or
 * `x-ratelimit-remaining: 0`, or a `RATE_LIMITED` GraphQL error) is a retry
 * after the delay GitHub names; other statuses map as a webhook's answers; an
 * unknown login fails for good. */
export function readCalendar(answer: Answer, login: string, nowMs: number): Day[] | Retry | Fail {
  const { status } = answer;
  if (status === 403 || status === 429) {
    const wait = rateLimitWaitSeconds(answer, nowMs);
    if (wait !== undefined) return retry(`GitHub: HTTP ${status}: rate limited`, { afterSeconds: wait });
  }
  const means = statusMeans(status);
  if (means === "retry") return retry(`GitHub: HTTP ${status}`);
  if (means === "fail") {
    const text = cut(answer.body);
    const why = status >= 300 && status < 400 ? `HTTP ${status}: redirects are not followed` : `HTTP ${status}`;
    return fail(`GitHub: ${why}${text === "" ? "" : `: ${text}`}`);
  }
  let parsed: GraphqlAnswer;
  try {
    parsed = JSON.parse(answer.body) as GraphqlAnswer;
    if (typeof parsed !== "object" || parsed === null) throw new Error("not an object");
  } catch (e) {
    return retry(`GitHub: unreadable answer: ${cut(String(e))}`);
  }
  const errors = Array.isArray(parsed.errors) ? parsed.errors : [];
  if (errors.some((e) => e.type === "RATE_LIMITED")) {
    const wait = rateLimitWaitSeconds(answer, nowMs);
    return retry("GitHub: rate limited", wait === undefined ? {} : { afterSeconds: wait });
  }
  const calendar = parsed.data?.user?.contributionsCollection?.contributionCalendar;
  if (calendar === undefined) {
    const first = errors[0];
    if (first !== undefined && first.type !== "NOT_FOUND") {
      return fail(`GitHub: ${cut(String(first.message ?? ""))}`);
    }
    return fail(`GitHub user ${JSON.stringify(login)} not found`);
  }
  const days: Day[] = [];
  for (const week of calendar.weeks ?? []) {
    for (const d of week.contributionDays ?? []) {
      const { date, contributionCount: count } = d;
      if (typeof date !== "string" || !isDate(date) || typeof count !== "number") {
        return retry(`GitHub: unreadable answer: day ${cut(JSON.stringify(d))}`);
      }
      days.push({ date, count });
    }
  }
  return days;
}

/** How long a rate-limited answer asks to wait, in seconds (`waitSeconds`:
 * `Retry-After`, else until `x-ratelimit-reset`), a minute for a spent budget
 * (`x-ratelimit-remaining: 0`) that names no reset; `undefined` when the
 * answer is no rate limit. */
function rateLimitWaitSeconds(answer: Answer, nowMs: number): number | undefined {
  if (answer.headers.get("x-ratelimit-remaining")?.trim() === "0") return retryAfterSeconds(answer, nowMs) ?? 60;
  // A budget not spent: only a wait the answer names outright, not its window's reset.
  const headers = new Headers(answer.headers);
  headers.delete("x-ratelimit-reset");
  return retryAfterSeconds({ ...answer, headers }, nowMs);
}
