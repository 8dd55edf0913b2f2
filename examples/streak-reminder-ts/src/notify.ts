// The two channels, pure: the reminder's text, a Discord webhook POST, a
// Telegram Bot API `sendMessage`, and what their answers mean (as a webhook's:
// 2xx delivered; 408, 425, 429 and 5xx retried after the delay they ask for;
// other statuses refused for good, with the API's text).
import { type Outcome, done, fail, retry } from "cron-fanout-handler";
import { type Answer, cut, retryAfterSeconds, statusMeans } from "./answers";
import type { Streak } from "./streak";

/** The receipts' channel names. */
export const DISCORD = "discord";
export const TELEGRAM = "telegram";

/** The most of a channel's answer read: only its error text and delay matter. */
export const MAX_ANSWER_BYTES = 16 * 1024;

/** A Telegram chat: its numeric id (also as text), or `@channelname`. */
export type ChatId = number | string;

/** Why `chat` is no Telegram chat, or `undefined`. */
export function checkChat(chat: unknown): string | undefined {
  if (typeof chat === "number" && Number.isSafeInteger(chat)) return undefined;
  if (typeof chat === "string" && (/^-?\d{1,19}$/.test(chat) || /^@[A-Za-z0-9_]{1,63}$/.test(chat))) {
    return undefined;
  }
  return "telegram_chat_id must be a chat id (a number) or @channelname";
}

/** The reminder. */
export function message(login: string, s: Streak): string {
  const days = s.current === 1 ? "day" : "days";
  return `${login}: your GitHub streak of ${s.current} ${days} ends at midnight: no contribution yet today (${s.today}).`;
}

/** A Discord webhook execution. Mentions are off: the text names a login, and
 * `@everyone` in one must not ping a server. */
export function discordRequest(webhookUrl: string, text: string): { url: string; init: RequestInit } {
  return post(webhookUrl, { content: text, allowed_mentions: { parse: [] } });
}

/** `POST {TELEGRAM_API_URL}/bot{token}/sendMessage` (the token is part of the
 * path: Telegram has no other way). */
export function telegramRequest(
  apiUrl: string,
  botToken: string,
  chat: ChatId,
  text: string,
): { url: string; init: RequestInit } {
  return post(`${apiUrl}/bot${botToken}/sendMessage`, { chat_id: chat, text });
}

function post(url: string, body: unknown): { url: string; init: RequestInit } {
  return {
    url,
    init: {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
      redirect: "manual",
    },
  };
}

/** What a channel's answer means. A permanent failure keeps the API's own
 * words: Telegram's `description`, Discord's `message`, else the text. */
export function readChannelAnswer(answer: Answer): Outcome {
  const means = statusMeans(answer.status);
  if (means === null) return done();
  if (means === "retry") {
    const wait = retryAfterSeconds(answer);
    return retry(`HTTP ${answer.status}`, wait === undefined ? {} : { afterSeconds: wait });
  }
  const text = apiText(answer.body);
  return fail(`HTTP ${answer.status}${text === "" ? "" : `: ${text}`}`);
}

function apiText(body: string): string {
  try {
    const v = JSON.parse(body) as { description?: unknown; message?: unknown };
    const said = v.description ?? v.message;
    if (typeof said === "string") return cut(said);
  } catch {
    // Not JSON: the text itself.
  }
  return cut(body);
}
