//! What holds a pending item: the reasons' views, the rule that picks one per
//! item from its keys' rows, and the counts per reason and key.

use super::*;
use serde_json::json;

fn row(reason: &str) -> WaitingRow {
    WaitingRow {
        id: 1,
        reason: reason.into(),
        last_error: None,
        until: None,
        key: None,
        in_flight: None,
        concurrency: None,
        learned: None,
        batches: None,
        priority: None,
        word: None,
    }
}

#[test]
fn each_reason_names_what_holds_the_item_in_its_own_fields() {
    let concurrency = WaitingRow {
        key: Some("host:x".into()),
        in_flight: Some(10),
        concurrency: Some(10),
        ..row("concurrency")
    };
    assert_eq!(
        serde_json::to_value(concurrency.view().unwrap()).unwrap(),
        json!({"reason": "concurrency", "key": "host:x", "in_flight": 10, "concurrency": 10})
    );
    let backoff = WaitingRow {
        until: Some(60_000),
        last_error: Some("503".into()),
        ..row("backoff")
    };
    assert_eq!(
        serde_json::to_value(backoff.view().unwrap()).unwrap(),
        json!({"reason": "backoff", "until": "1970-01-01T00:01:00.000Z", "last_error": "503"})
    );
    assert_eq!(
        serde_json::to_value(row("due").view().unwrap()).unwrap(),
        json!({"reason": "due"})
    );
}

#[test]
fn a_row_missing_what_its_reason_names_or_of_an_unknown_reason_has_no_view() {
    assert_eq!(row("rate").view(), None);
    assert_eq!(row("lease").view(), None);
}

fn count(reason: &str, n: i64) -> ReasonCount {
    ReasonCount {
        reason: reason.into(),
        n,
        ..ReasonCount::default()
    }
}

#[test]
fn the_counts_name_every_reason_and_add_up_to_the_pending_items() {
    let rows = [count("rate", 3), count("due", 2)];
    let counts = WaitingCounts::of(&rows, 9);
    let json = serde_json::to_value(&counts).unwrap();
    for reason in REASONS {
        assert!(json.get(reason).is_some(), "{reason}: {json}");
    }
    assert_eq!(
        (json["rate"].clone(), json["not_read"].clone()),
        (json!(3), json!(4))
    );
    let sum: i64 = counts.by_reason.values().sum::<i64>() + counts.not_read;
    assert_eq!(sum, 9);
    assert_eq!(WaitingCounts::batch_paused(5).by_reason["batch_paused"], 5);
}

#[test]
fn the_top_keys_are_those_holding_most_items_each_with_its_state_and_a_pause_with_its_word() {
    let keyed = |reason: &str, key: &str, n: i64| ReasonCount {
        key: Some(key.into()),
        ..count(reason, n)
    };
    let rows = [
        count("due", 4),
        ReasonCount {
            in_flight: Some(2),
            concurrency: Some(2),
            ..keyed("concurrency", "conc:a", 3)
        },
        ReasonCount {
            until: Some(60_000),
            ..keyed("paused", "host:x", 5)
        },
        ReasonCount {
            last_error: Some("HTTP 429, retry after 60 s".into()),
            ..keyed("backoff", "host:x", 1)
        },
        ReasonCount {
            until: Some(1_000),
            learned: Some(0),
            ..keyed("rate", "rate:b", 3)
        },
    ];
    let top = top_keys(&rows);
    assert_eq!(
        serde_json::to_value(&top).unwrap(),
        json!([
            {"items": 5, "reason": "paused", "key": "host:x",
             "until": "1970-01-01T00:01:00.000Z", "word": "HTTP 429, retry after 60 s"},
            {"items": 3, "reason": "concurrency", "key": "conc:a", "in_flight": 2, "concurrency": 2},
            {"items": 3, "reason": "rate", "key": "rate:b",
             "next_token_at": "1970-01-01T00:00:01.000Z", "learned": false},
        ])
    );
    // The backoff items on the paused key still count as backoff.
    assert_eq!(WaitingCounts::of(&rows, 16).by_reason["backoff"], 1);
    let many: Vec<ReasonCount> = (0..9)
        .map(|i| ReasonCount {
            until: Some(0),
            ..keyed("paused", &format!("k{i}"), i)
        })
        .collect();
    let top = top_keys(&many);
    assert_eq!(top.len(), TOP_KEYS);
    assert_eq!(top[0].items, 8);
}

fn batch_row(key: Option<&str>) -> KeyWaitRow {
    KeyWaitRow {
        status: "running".into(),
        ahead_items: 0,
        ahead_batches: 0,
        ahead_priority: None,
        key: key.map(Into::into),
        paused_until: None,
        concurrency: None,
        in_flight: None,
        rate: None,
        learned: None,
        tokens: None,
        tokens_ahead: None,
        next_token_at: None,
        word: None,
    }
}

fn pending(id: i64, keys: &[&str]) -> PendingItem {
    PendingItem {
        id,
        run_after: 0,
        limits: Some(serde_json::to_string(keys).unwrap()),
        last_error: None,
    }
}

fn rated(key: &str, tokens: f64, tokens_ahead: f64, next: i64) -> KeyWaitRow {
    KeyWaitRow {
        rate: Some(60),
        tokens: Some(tokens),
        tokens_ahead: Some(tokens_ahead),
        next_token_at: Some(next),
        ..batch_row(Some(key))
    }
}

#[test]
fn a_pause_holds_before_a_full_slot_and_a_slot_before_a_rate_and_the_latest_end_wins() {
    let rows = [
        rated("r:a", 0.0, 0.0, 5_000),
        rated("r:b", 0.0, 0.0, 9_000),
        KeyWaitRow {
            concurrency: Some(1),
            in_flight: Some(1),
            ..batch_row(Some("c:x"))
        },
        KeyWaitRow {
            paused_until: Some(2_000),
            ..batch_row(Some("host:p"))
        },
    ];
    let reasons = |keys: &[&str]| {
        let r = item_reasons(&[pending(1, keys)], &rows, 100, 10);
        (r[0].reason.clone(), r[0].key.clone(), r[0].until)
    };
    let named = |reason: &str, key: &str, until: Option<i64>| {
        (reason.to_string(), Some(key.to_string()), until)
    };
    assert_eq!(
        reasons(&["r:a", "c:x", "host:p"]),
        named("paused", "host:p", Some(2_000))
    );
    assert_eq!(reasons(&["r:a", "c:x"]), named("concurrency", "c:x", None));
    assert_eq!(reasons(&["r:a", "r:b"]), named("rate", "r:b", Some(9_000)));
    // A key without a limit in force (no row) holds nothing.
    assert_eq!(reasons(&["nobody"]).0, "due");
}

#[test]
fn one_rate_key_counts_the_claims_look_ahead_and_two_count_only_tokens_now() {
    // No token now, one within the second the claim looks ahead.
    let rows = [rated("r:a", 0.0, 1.0, 900), rated("r:b", 5.0, 5.0, 0)];
    let one = item_reasons(&[pending(1, &["r:a"])], &rows, 100, 10);
    assert_eq!(one[0].reason, "due");
    let two = item_reasons(&[pending(1, &["r:a", "r:b"])], &rows, 100, 10);
    assert_eq!(two[0].reason, "rate");
    assert_eq!(two[0].key.as_deref(), Some("r:a"));
}

#[test]
fn a_paused_batch_then_a_backoff_then_the_keys_then_the_turn_come_first() {
    let mut batch = KeyWaitRow {
        paused_until: Some(2_000),
        ..batch_row(Some("host:p"))
    };
    let backoff = PendingItem {
        run_after: 500,
        last_error: Some("429".into()),
        ..pending(2, &["host:p"])
    };
    let items = [pending(1, &[]), backoff, pending(3, &["host:p"])];
    let reasons = |rows: &[KeyWaitRow]| -> Vec<String> {
        item_reasons(&items, rows, 100, 10)
            .into_iter()
            .map(|r| r.reason)
            .collect()
    };
    assert_eq!(
        reasons(std::slice::from_ref(&batch)),
        ["due", "backoff", "paused"]
    );
    batch.ahead_items = 10;
    batch.ahead_batches = 2;
    batch.ahead_priority = Some(7);
    assert_eq!(
        reasons(std::slice::from_ref(&batch)),
        ["turn", "backoff", "paused"]
    );
    batch.status = "paused".into();
    assert_eq!(reasons(std::slice::from_ref(&batch)), ["batch_paused"; 3]);
    // No row: the batch was not found.
    assert!(item_reasons(&items, &[], 100, 10).is_empty());
}

#[test]
fn the_counts_split_by_key_and_name_the_pause_s_word_from_the_items_in_backoff_on_it() {
    let rows = [KeyWaitRow {
        paused_until: Some(2_000),
        ..batch_row(Some("host:p"))
    }];
    let backoff = |id, word: &str| PendingItem {
        run_after: 500,
        last_error: Some(word.into()),
        ..pending(id, &["host:p"])
    };
    let items = [
        backoff(1, "HTTP 429, retry after 1 s"),
        backoff(2, "HTTP 429, retry after 2 s"),
        pending(3, &["host:p"]),
        PendingItem {
            run_after: 700,
            ..pending(4, &[])
        },
        pending(5, &[]),
    ];
    let counts = reason_counts(&items, &rows, 100, 10);
    type Shown<'a> = (&'a str, Option<&'a str>, i64, Option<i64>, Option<&'a str>);
    let rows: Vec<Shown> = counts
        .iter()
        .map(|c| {
            (
                c.reason.as_str(),
                c.key.as_deref(),
                c.n,
                c.until,
                c.last_error.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("backoff", None, 1, None, None),
            (
                "backoff",
                Some("host:p"),
                2,
                None,
                Some("HTTP 429, retry after 2 s")
            ),
            ("due", None, 1, None, None),
            ("paused", Some("host:p"), 1, Some(2_000), None),
        ]
    );
    assert_eq!(
        top_keys(&counts)[0].word.as_deref(),
        Some("HTTP 429, retry after 2 s")
    );
}

#[test]
fn the_keys_asked_about_are_each_held_key_once_and_garbage_holds_none() {
    let garbage = PendingItem {
        limits: Some("not json".into()),
        ..pending(3, &[])
    };
    let items = [pending(1, &["b", "a"]), pending(2, &["a", "c"]), garbage];
    assert_eq!(keys_held(&items), ["a", "b", "c"]);
}
