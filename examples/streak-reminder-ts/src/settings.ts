// The Worker's settings, read from its Env (vars and secrets): where GitHub's,
// Discord's and Telegram's APIs are (settings, so tests point them at fakes),
// the two tokens (secrets: never logged, never in a reason, only in the request
// that needs them), and how long the channels may take.

/** What a check needs besides the user. */
export interface Settings {
  /** `GITHUB_API_URL`, without a trailing `/`. */
  githubApiUrl: string;
  /** `GITHUB_TOKEN` (secret): sent as `Authorization: Bearer` to GitHub only. */
  githubToken: string;
  /** `TELEGRAM_API_URL`, without a trailing `/`. */
  telegramApiUrl: string;
  /** `TELEGRAM_BOT_TOKEN` (secret): part of the Bot API's path, as Telegram
   * requires. Only needed by users with a Telegram chat. */
  telegramBotToken: string | undefined;
  /** `DISCORD_API_URL`: a user's Discord webhook URL must be one of its
   * `/api/webhooks/…`, so an item cannot make this Worker fetch elsewhere. */
  discordApiUrl: string;
  /** `CHANNEL_DEADLINE_MS`: a channel with no answer this long after the
   * check started is a transient failure of its own. Keep it under
   * cron-fanout's `JOB_TIMEOUT_MS`, so a late channel never costs the others'
   * receipts. */
  channelDeadlineMs: number;
}

export const DEFAULTS = {
  GITHUB_API_URL: "https://api.github.com",
  TELEGRAM_API_URL: "https://api.telegram.org",
  DISCORD_API_URL: "https://discord.com",
  // cron-fanout's default JOB_TIMEOUT_MS is 10 s; its own channels get 9.5 s.
  CHANNEL_DEADLINE_MS: "9500",
} as const;

/** The settings from `env`, or an error that names the setting and the rule,
 * never a value. Blank is unset. */
export function readSettings(env: Record<string, unknown>): Settings | string {
  const get = (name: string): string | undefined => {
    const v = env[name];
    return typeof v === "string" && v.trim() !== "" ? v.trim() : undefined;
  };
  const base = (name: keyof typeof DEFAULTS): string | undefined => {
    const value = get(name) ?? DEFAULTS[name];
    try {
      const u = new URL(value);
      if ((u.protocol === "http:" || u.protocol === "https:") && u.search === "" && u.hash === "") {
        return value.replace(/\/+$/, "");
      }
    } catch {
      // Not a URL: said below.
    }
    return undefined;
  };
  const github = base("GITHUB_API_URL");
  const telegram = base("TELEGRAM_API_URL");
  const discord = base("DISCORD_API_URL");
  for (const [name, value] of [
    ["GITHUB_API_URL", github],
    ["TELEGRAM_API_URL", telegram],
    ["DISCORD_API_URL", discord],
  ] as const) {
    if (value === undefined) return `${name} must be an http(s) base URL without a query`;
  }
  const token = get("GITHUB_TOKEN");
  if (token === undefined) return "GITHUB_TOKEN is not set";
  const deadline = Number(get("CHANNEL_DEADLINE_MS") ?? DEFAULTS.CHANNEL_DEADLINE_MS);
  if (!Number.isSafeInteger(deadline) || deadline < 1) {
    return "CHANNEL_DEADLINE_MS must be a whole number of milliseconds ≥ 1";
  }
  return {
    githubApiUrl: github!,
    githubToken: token,
    telegramApiUrl: telegram!,
    telegramBotToken: get("TELEGRAM_BOT_TOKEN"),
    discordApiUrl: discord!,
    channelDeadlineMs: deadline,
  };
}

/** The secrets, for scrubbing them out of any text that leaves a check. */
export function secrets(s: Settings): string[] {
  return [s.githubToken, ...(s.telegramBotToken === undefined ? [] : [s.telegramBotToken])];
}
