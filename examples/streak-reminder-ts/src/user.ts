// One user, as a `service` item's `data` carries it. cron-fanout stores `data`
// as it is, so it is checked here, when the item runs: a user that breaks a
// rule fails for good with the rule in its reason, and nothing is sent.
import { checkChat, type ChatId, DISCORD, TELEGRAM } from "./notify";
import type { Settings } from "./settings";
import { isZone } from "./streak";

/** `{"github_login": "octocat", "timezone": "Europe/Berlin",
 *   "discord_webhook_url": "https://discord.com/api/webhooks/…",
 *   "telegram_chat_id": 123456789}`: at least one channel. */
export interface User {
  github_login: string;
  /** The user's IANA zone, where "today" is; default "UTC". */
  timezone: string;
  discord_webhook_url?: string;
  telegram_chat_id?: ChatId;
}

const FIELDS = new Set(["github_login", "timezone", "discord_webhook_url", "telegram_chat_id"]);

/** GitHub's login rules: 1 to 39 letters, digits or single inner hyphens. */
function isLogin(login: string): boolean {
  return /^[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}$/.test(login);
}

/** The user in `data`, or why it is none. */
export function readUser(data: unknown, settings: Settings): User | string {
  if (typeof data !== "object" || data === null || Array.isArray(data)) {
    return "data must be an object {github_login, timezone, discord_webhook_url, telegram_chat_id}";
  }
  const d = data as Record<string, unknown>;
  const unknown = Object.keys(d).find((k) => !FIELDS.has(k));
  if (unknown !== undefined) return `unknown field ${JSON.stringify(unknown)}`;
  const login = d.github_login;
  if (typeof login !== "string" || !isLogin(login)) {
    return `github_login ${JSON.stringify(login)} is not a GitHub login`;
  }
  const timezone = d.timezone ?? "UTC";
  if (typeof timezone !== "string" || !isZone(timezone)) {
    return `timezone ${JSON.stringify(timezone)} is not an IANA time zone`;
  }
  const discord = d.discord_webhook_url;
  const chat = d.telegram_chat_id;
  if (discord === undefined && chat === undefined) {
    return "give at least one channel: discord_webhook_url or telegram_chat_id";
  }
  const user: User = { github_login: login, timezone };
  if (discord !== undefined) {
    const webhooks = `${settings.discordApiUrl}/api/webhooks/`;
    if (typeof discord !== "string" || !discord.startsWith(webhooks) || /[\s#?]/.test(discord)) {
      return `discord_webhook_url must be a webhook of ${webhooks}…`;
    }
    user.discord_webhook_url = discord;
  }
  if (chat !== undefined) {
    const bad = checkChat(chat);
    if (bad !== undefined) return bad;
    user.telegram_chat_id = chat as ChatId;
  }
  return user;
}

/** The channels this user has, in a fixed order. */
export function channels(user: User): string[] {
  return [
    ...(user.discord_webhook_url === undefined ? [] : [DISCORD]),
    ...(user.telegram_chat_id === undefined ? [] : [TELEGRAM]),
  ];
}
