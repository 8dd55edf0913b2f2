// The streak at the same day, zone and DST edges as the Rust example's
// (examples/streak-reminder/src/streak.rs), inside workerd: its Intl zones.
import { describe, expect, it } from "vitest";
import { type Day, atRisk, isZone, localDate, streak } from "../src/streak";

/** The instant `local` (YYYY-MM-DDTHH:MM:SS) in `zone`, in ms: the earlier one
 * when the local time happens twice. */
function at(local: string, zone: string): number {
  const naive = Date.parse(`${local}Z`);
  const shown = (ms: number) =>
    new Intl.DateTimeFormat("sv-SE", {
      timeZone: zone,
      year: "numeric",
      month: "2-digit",
      day: "2-digit",
      hour: "2-digit",
      minute: "2-digit",
      second: "2-digit",
      hourCycle: "h23",
    })
      .format(ms)
      .replace(" ", "T");
  // Every offset from -14 h to +14 h in quarter hours; the earliest that shows it.
  for (let q = 14 * 4; q >= -14 * 4; q--) {
    const ms = naive - q * 15 * 60_000;
    if (shown(ms) === local) return ms;
  }
  throw new Error(`${local} does not happen in ${zone}`);
}

const utc = (instant: string) => Date.parse(instant);

function calendar(days: [string, number][]): Day[] {
  return days.map(([date, count]) => ({ date, count }));
}

describe("the local date", () => {
  it("is the user's, not UTC's, across midnight", () => {
    // 23:30 UTC is already tomorrow in Berlin, still today in New York.
    const now = utc("2026-11-24T23:30:00Z");
    expect(localDate(now, "Europe/Berlin")).toBe("2026-11-25");
    expect(localDate(now, "America/New_York")).toBe("2026-11-24");
    expect(localDate(now, "UTC")).toBe("2026-11-24");
    // 00:30 UTC is still yesterday in Los Angeles.
    expect(localDate(utc("2026-11-25T00:30:00Z"), "America/Los_Angeles")).toBe("2026-11-24");
  });

  it("of the zones at the ends of the day are a calendar day apart", () => {
    // At 18:00 on Kiritimati (UTC+14), Pago Pago (UTC-11) is a day behind.
    const now = at("2026-11-24T18:00:00", "Pacific/Kiritimati");
    expect(localDate(now, "Pacific/Kiritimati")).toBe("2026-11-24");
    expect(localDate(now, "Pacific/Pago_Pago")).toBe("2026-11-23");
  });

  it("changes at the last and first second of a local day", () => {
    const zone = "Asia/Kolkata"; // UTC+05:30: midnight is not on a UTC hour
    const last = at("2026-11-24T23:59:59", zone);
    expect(localDate(last, zone)).toBe("2026-11-24");
    expect(localDate(last + 1_000, zone)).toBe("2026-11-25");
  });

  it("of DST days is kept on both sides of the change", () => {
    // Berlin springs forward at 02:00 on 2026-03-29 (a 23-hour day) and falls
    // back at 03:00 on 2026-10-25 (a 25-hour day).
    for (const local of [
      "2026-03-29T00:30:00",
      "2026-03-29T03:30:00",
      "2026-03-29T18:00:00",
      "2026-03-29T23:59:00",
    ]) {
      expect(localDate(at(local, "Europe/Berlin"), "Europe/Berlin"), local).toBe("2026-03-29");
    }
    // 02:30 happens twice on the fall-back day; both are that day, and the
    // day's last hour is still it.
    const first = at("2026-10-25T02:30:00", "Europe/Berlin");
    expect(first).toBe(utc("2026-10-25T00:30:00Z"));
    expect(localDate(first, "Europe/Berlin")).toBe("2026-10-25");
    expect(localDate(first + 3_600_000, "Europe/Berlin")).toBe("2026-10-25");
    expect(localDate(at("2026-10-25T23:59:00", "Europe/Berlin"), "Europe/Berlin")).toBe(
      "2026-10-25",
    );
    // 18:00 New York on its fall-back day is 23:00 UTC, not 22:00.
    const ny = at("2026-11-01T18:00:00", "America/New_York");
    expect(ny).toBe(utc("2026-11-01T23:00:00Z"));
    expect(localDate(ny, "America/New_York")).toBe("2026-11-01");
  });

  it("needs a zone the runtime knows", () => {
    expect(isZone("Europe/Berlin")).toBe(true);
    expect(isZone("Mars/Olympus")).toBe(false);
  });
});

describe("the streak", () => {
  it("ending yesterday is at risk today", () => {
    const days = calendar([
      ["2026-11-20", 0],
      ["2026-11-21", 1],
      ["2026-11-22", 4],
      ["2026-11-23", 2],
      ["2026-11-24", 0],
    ]);
    const s = streak(days, "2026-11-24");
    expect([s.contributedToday, s.current]).toEqual([false, 3]);
    expect(atRisk(s)).toBe(true);
  });

  it("extended by a contribution today is safe", () => {
    const s = streak(calendar([["2026-11-22", 1], ["2026-11-23", 2], ["2026-11-24", 1]]), "2026-11-24");
    expect([s.contributedToday, s.current]).toEqual([true, 3]);
    expect(atRisk(s)).toBe(false);
  });

  it("broken yesterday is not at risk", () => {
    const days = calendar([
      ["2026-11-21", 3],
      ["2026-11-22", 5],
      ["2026-11-23", 0],
      ["2026-11-24", 0],
    ]);
    const s = streak(days, "2026-11-24");
    expect([s.contributedToday, s.current]).toEqual([false, 0]);
    expect(atRisk(s)).toBe(false);
  });

  it("of an empty calendar is nothing to lose", () => {
    const s = streak([], "2026-11-24");
    expect(s).toEqual({ today: "2026-11-24", contributedToday: false, current: 0 });
    expect(atRisk(s)).toBe(false);
  });

  it("ignores days after the user's today", () => {
    // GitHub's calendar already has the 25th (a zone ahead of the user's).
    const s = streak(calendar([["2026-11-23", 1], ["2026-11-24", 0], ["2026-11-25", 6]]), "2026-11-24");
    expect([s.contributedToday, s.current]).toEqual([false, 1]);
    expect(atRisk(s)).toBe(true);
  });

  it("is broken by a day missing from the calendar, whatever the order", () => {
    const s = streak(calendar([["2026-11-23", 1], ["2026-11-20", 1], ["2026-11-21", 2]]), "2026-11-24");
    // The 22nd is missing: only the 23rd counts.
    expect([s.contributedToday, s.current]).toEqual([false, 1]);
  });

  it("runs across month and year ends", () => {
    const days = calendar([
      ["2026-12-30", 1],
      ["2026-12-31", 1],
      ["2027-01-01", 1],
      ["2027-01-02", 0],
    ]);
    const s = streak(days, "2027-01-02");
    expect([s.contributedToday, s.current]).toEqual([false, 3]);
  });
});
