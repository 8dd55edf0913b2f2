//! The learning rule, one behaviour a test.

use super::*;

const NOW: i64 = 1_795_000_000_000;

fn taken(taken: i64, span_ms: i64) -> Seen {
    Seen {
        taken,
        span_ms,
        ..Seen::default()
    }
}

#[test]
fn the_growth_table_is_five_quarters_a_window_rounded() {
    for (w, factor) in GROWTH_X1024.iter().enumerate() {
        let exact = 1_024.0 * 1.25f64.powi(w as i32);
        assert_eq!(*factor, exact.round() as i64, "window {w}");
    }
}

#[test]
fn a_first_refusal_learns_what_the_receiver_took() {
    // 60 taken in 10 s (6 a second): 360 a minute; a span under a second
    // counts as one.
    let l = learned_after(None, taken(60, 10_000), None, NOW);
    assert_eq!(
        (l.per_minute, l.before, l.source),
        (360, Some(360), Source::Refusals)
    );
    assert_eq!(
        learned_after(None, taken(10, 200), None, NOW).per_minute,
        600
    );
    assert_eq!((l.changed_at, l.refused_at), (NOW, NOW));
}

#[test]
fn a_first_refusal_after_an_empty_window_starts_from_the_wait_not_the_floor() {
    // Nothing taken: one start per second the receiver asked to wait.
    let seen = Seen {
        wait_ms: Some(1_000),
        ..Seen::default()
    };
    let l = learned_after(None, seen, None, NOW);
    assert_eq!(
        (l.per_minute, l.before, l.source),
        (60, None, Source::RetryAfter)
    );
    // A long wait or none: one a window (12 a minute), never one a minute.
    let long = Seen {
        wait_ms: Some(3_600_000),
        ..Seen::default()
    };
    assert_eq!(learned_after(None, long, None, NOW).per_minute, 12);
    assert_eq!(
        learned_after(None, Seen::default(), None, NOW).per_minute,
        12
    );
}

#[test]
fn an_announced_rate_is_the_rate_whatever_was_taken_or_learned() {
    let seen = Seen {
        taken: 500,
        span_ms: 1_000,
        announced: announced_per_minute(Some(10), Some(5_000)),
        wait_ms: Some(1_000),
    };
    let l = learned_after(None, seen, None, NOW);
    assert_eq!(
        (l.per_minute, l.before, l.source),
        (120, Some(120), Source::Headers)
    );
    // It replaces a learned rate even within the window, and is not probed above.
    let old = learned_after(None, taken(600, 1_000), None, NOW - 100);
    let l = learned_after(Some(old), seen, None, NOW);
    assert_eq!(l.per_minute, 120);
    assert_eq!(at(l, None, NOW + 100 * WINDOW_MS).unwrap().per_minute, 120);
    assert_eq!(announced_per_minute(Some(40), Some(20_000)), Some(120));
    assert_eq!(announced_per_minute(Some(1), Some(86_400_000)), Some(1));
    assert_eq!(announced_per_minute(Some(0), Some(1_000)), None);
    assert_eq!(announced_per_minute(Some(10), None), None);
}

#[test]
fn refusals_within_one_window_keep_the_rate() {
    let l = learned_after(None, taken(60, 10_000), None, NOW);
    let burst = learned_after(Some(l), taken(120, WINDOW_MS), None, NOW + 500);
    assert_eq!(burst.per_minute, 360);
    assert_eq!(burst.refused_at, NOW + 500, "the idle hour starts over");
}

#[test]
fn a_later_refusal_halves_the_rate_in_force_and_remembers_it() {
    let l = learned_after(None, taken(60, 10_000), None, NOW);
    let again = learned_after(Some(l), taken(100, WINDOW_MS), None, NOW + WINDOW_MS);
    assert_eq!((again.per_minute, again.before), (180, Some(360)));
}

#[test]
fn recovery_compounds_back_to_the_rate_before_the_refusal_then_probes_above_it() {
    let halved = Learned {
        per_minute: 3_000,
        before: Some(6_000),
        source: Source::Refusals,
        changed_at: NOW,
        refused_at: NOW,
    };
    let rate = |w: i64| at(halved, None, NOW + w * WINDOW_MS).unwrap().per_minute;
    assert_eq!(at(halved, None, NOW + WINDOW_MS - 1), Some(halved));
    assert_eq!([rate(1), rate(2), rate(3)], [3_750, 4_687, 5_859]);
    assert_eq!(rate(4), 6_000, "back at the rate before, held");
    assert_eq!(rate(5), 6_750, "then an eighth of it more a window");
    assert_eq!(rate(8), 6_000 + 4 * 750);
    // Without a known rate before (learned from a wait) it compounds on.
    let guessed = Learned {
        before: None,
        ..halved
    };
    // 3,000 × 9,537 / 1,024 after ten windows.
    assert_eq!(
        at(guessed, None, NOW + 10 * WINDOW_MS).unwrap().per_minute,
        27_940
    );
}

#[test]
fn a_learned_rate_never_goes_below_one_a_minute() {
    // A refusal every window, each after a window's growth, ends at the floor.
    let mut l = learned_after(None, taken(50, 10_000), None, NOW);
    for n in 1..40 {
        l = learned_after(Some(l), taken(1, WINDOW_MS), None, NOW + n * WINDOW_MS);
    }
    assert_eq!(l.per_minute, FLOOR_PER_MINUTE);
    // And from there it climbs back: held at the floor it cut from, then probing.
    let rate = |w: i64| {
        at(l, None, l.changed_at + w * WINDOW_MS)
            .unwrap()
            .per_minute
    };
    assert_eq!([rate(0), rate(4), rate(6)], [1, 1, 3]);
}

#[test]
fn a_set_rate_is_the_ceiling_learning_keeps_under() {
    // PUT /limits with 5 a second: 300 a minute.
    let ceiling = Some(ceiling_per_minute(5, 1));
    assert_eq!(ceiling, Some(300));
    let l = learned_after(None, taken(1_000, WINDOW_MS), ceiling, NOW);
    assert_eq!(l.per_minute, 300, "12,000 a minute taken, kept under 300");
    let later = at(l, ceiling, NOW + 50 * WINDOW_MS).unwrap();
    assert_eq!(later.per_minute, 300, "the growth stops at the set rate");
    assert_eq!(ceiling_per_minute(1, 3_600), FLOOR_PER_MINUTE);
}

#[test]
fn a_rate_nothing_refused_for_an_hour_is_dropped() {
    let l = learned_after(None, taken(60, 10_000), None, NOW);
    assert!(at(l, None, NOW + IDLE_MS - 1).is_some());
    assert_eq!(at(l, None, NOW + IDLE_MS), None);
    // A refusal after the idle hour learns afresh from what was taken.
    let fresh = learned_after(Some(l), taken(10, 10_000), None, NOW + IDLE_MS);
    assert_eq!(fresh.per_minute, 60);
}

#[test]
fn a_refusal_of_what_was_taken_alone_is_the_rule_with_nothing_else_seen() {
    let l = refused(None, 60, 10_000, None, NOW);
    assert_eq!(l, learned_after(None, taken(60, 10_000), None, NOW));
    assert_eq!(
        (step(6_000), step(4)),
        (750, 1),
        "probing: an eighth of before"
    );
}

#[test]
fn sources_round_trip_by_name_and_old_rows_read_as_refusals() {
    for s in [Source::RetryAfter, Source::Headers, Source::Refusals] {
        assert_eq!(Source::parse(Some(s.as_str())), s);
    }
    assert_eq!(Source::parse(None), Source::Refusals);
}

#[test]
fn a_learned_burst_never_exceeds_the_set_limit_s_own() {
    // 356 a minute learned under a set 6/s with a burst of 2: 2, not 5.
    assert_eq!(burst_under(356, Some(2)), 2);
    assert_eq!(burst_under(356, None), 5);
    assert_eq!(burst_under(30, Some(2)), 1);
}
