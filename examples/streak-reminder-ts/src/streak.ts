// The streak, pure: which local day it is for the user (`now` and their zone
// in), whether that day has a contribution, and how many days in a row end at
// it. GitHub's calendar is a list of dates with counts; it is read as the
// user's own days (see the README on which zone GitHub dates its days in).

/** One day of the contribution calendar: `date` as YYYY-MM-DD. */
export interface Day {
  date: string;
  count: number;
}

/** Where the user stands today. */
export interface Streak {
  /** The user's local date (YYYY-MM-DD). */
  today: string;
  contributedToday: boolean;
  /** Days in a row with a contribution, ending today, or yesterday when today
   * has none yet (a streak is not broken before the day is over). */
  current: number;
}

/** A streak that ends at midnight unless the user contributes. */
export function atRisk(s: Streak): boolean {
  return !s.contributedToday && s.current > 0;
}

/** Whether `zone` is an IANA time zone the runtime knows. */
export function isZone(zone: string): boolean {
  try {
    new Intl.DateTimeFormat("en-US", { timeZone: zone });
    return true;
  } catch {
    return false;
  }
}

const formats = new Map<string, Intl.DateTimeFormat>();

/** The local date (YYYY-MM-DD) in `zone` at `nowMs` (ms since the epoch). */
export function localDate(nowMs: number, zone: string): string {
  let format = formats.get(zone);
  if (format === undefined) {
    format = new Intl.DateTimeFormat("en-US", {
      timeZone: zone,
      year: "numeric",
      month: "2-digit",
      day: "2-digit",
    });
    formats.set(zone, format);
  }
  const part = (type: string) =>
    format.formatToParts(nowMs).find((p) => p.type === type)?.value ?? "";
  return `${part("year").padStart(4, "0")}-${part("month")}-${part("day")}`;
}

/** Whether `date` is a real YYYY-MM-DD date. */
export function isDate(date: string): boolean {
  if (!/^\d{4}-\d{2}-\d{2}$/.test(date)) return false;
  const ms = Date.parse(`${date}T00:00:00Z`);
  return Number.isFinite(ms) && new Date(ms).toISOString().startsWith(date);
}

/** The day before `date` (YYYY-MM-DD). */
export function dayBefore(date: string): string {
  const ms = Date.parse(`${date}T00:00:00Z`) - 86_400_000;
  return new Date(ms).toISOString().slice(0, 10);
}

/** The streak as of `today` from the calendar's days (any order; days after
 * `today` are ignored: a calendar can run ahead of a zone behind GitHub's; a
 * date missing from the calendar counts as no contribution). */
export function streak(days: readonly Day[], today: string): Streak {
  const counts = new Map<string, number>();
  for (const d of days) {
    if (d.date <= today) counts.set(d.date, (counts.get(d.date) ?? 0) + d.count);
  }
  const has = (date: string) => (counts.get(date) ?? 0) > 0;
  const contributedToday = has(today);
  let day = contributedToday ? today : dayBefore(today);
  let current = 0;
  while (has(day)) {
    current += 1;
    day = dayBefore(day);
  }
  return { today, contributedToday, current };
}
