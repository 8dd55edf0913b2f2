// streak-reminder in TypeScript: the seed's app as a Worker that cron-fanout's
// `service` items run in, on cron-fanout-handler. Each user is one item; at
// 18:00 in the user's zone cron-fanout calls this Worker with the user as
// `data`, and the check reminds Discord and Telegram (two channels, each with
// its receipt) when the GitHub streak ends at midnight.
import { fail, handler } from "cron-fanout-handler";
import { checkStreak } from "./check";
import { readSettings } from "./settings";

export default {
  fetch: handler<unknown, Record<string, unknown>>(async (item, ctx) => {
    const settings = readSettings(ctx.env);
    if (typeof settings === "string") return fail(`not run: ${settings}`);
    return checkStreak(item.data, ctx, settings, {
      fetch: (url, init) => fetch(url, init),
      now: () => Date.now(),
    });
  }),
};
