// One user's daily check: ask GitHub for the contribution calendar, work out the
// streak in the user's own zone, and when it is at risk (no contribution today,
// a streak to lose) remind each channel an earlier attempt did not, both at
// once, each reported as a channel: cron-fanout keeps their receipts, so a
// retry never reminds a channel twice.
import { type Outcome, done, fail, retry } from "cron-fanout-handler";
import { cut, readAnswer, scrub } from "./answers";
import * as github from "./github";
import * as notify from "./notify";
import { type Settings, secrets } from "./settings";
import { atRisk, localDate, streak } from "./streak";
import { type User, channels, readUser } from "./user";

/** What a check does outside itself: the Worker's `fetch` and clock, or a
 * test's. */
export interface Outside {
  fetch(url: string, init: RequestInit): Promise<Response>;
  now(): number;
}

/** The channels' side of the handler's `ctx`. */
export interface Channels {
  delivered(name: string): boolean;
  channel(name: string, outcome: Outcome): void;
}

/** Checks the user in `data`; the item's outcome (its channels reported on
 * `ctx`, which then decide it). */
export async function checkStreak(
  data: unknown,
  ctx: Channels,
  settings: Settings,
  outside: Outside,
): Promise<Outcome> {
  const started = outside.now();
  const user = readUser(data, settings);
  if (typeof user === "string") return fail(`not run: ${user}`);
  const todo = channels(user).filter((c) => !ctx.delivered(c));
  // An earlier attempt reminded every channel: nothing to ask anyone.
  if (todo.length === 0) return done();
  const hidden = secrets(settings);

  const request = github.calendarRequest(
    settings.githubApiUrl,
    settings.githubToken,
    user.github_login,
    started,
  );
  let days;
  try {
    const answer = await outside.fetch(request.url, request.init);
    days = github.readCalendar(
      await readAnswer(answer, github.MAX_ANSWER_BYTES),
      user.github_login,
      outside.now(),
    );
  } catch (e) {
    return retry(`GitHub: ${cut(scrub(String(e), hidden))}`);
  }
  if (!Array.isArray(days)) return days;
  const s = streak(days, localDate(outside.now(), user.timezone));
  if (!atRisk(s)) return done();

  // Both at once, each until it answers or the channel deadline (counted from
  // the check's start, GitHub's time included) passes: a late channel is a
  // transient failure of its own, reported with the other's answer.
  const text = notify.message(user.github_login, s);
  const late = new AbortController();
  const left = Math.max(1, started + settings.channelDeadlineMs - outside.now());
  const timer = setTimeout(() => late.abort(), left);
  try {
    const outcomes = await Promise.all(
      todo.map((c) => remind(c, user, text, settings, outside, late.signal)),
    );
    todo.forEach((c, i) => ctx.channel(c, outcomes[i] ?? done()));
  } finally {
    clearTimeout(timer);
  }
  return done();
}

/** Reminds `user` on `channel`: what its answer (or none) means. */
async function remind(
  channel: string,
  user: User,
  text: string,
  settings: Settings,
  outside: Outside,
  signal: AbortSignal,
): Promise<Outcome> {
  let request;
  if (channel === notify.DISCORD) {
    request = notify.discordRequest(user.discord_webhook_url ?? "", text);
  } else if (settings.telegramBotToken === undefined) {
    return fail("not sent: TELEGRAM_BOT_TOKEN is not set");
  } else {
    const chat = user.telegram_chat_id ?? "";
    request = notify.telegramRequest(settings.telegramApiUrl, settings.telegramBotToken, chat, text);
  }
  try {
    const answer = await outside.fetch(request.url, { ...request.init, signal });
    return notify.readChannelAnswer(await readAnswer(answer, notify.MAX_ANSWER_BYTES));
  } catch (e) {
    if (signal.aborted) return retry(`timed out after ${settings.channelDeadlineMs} ms`);
    return retry(cut(scrub(String(e), secrets(settings))));
  }
}
