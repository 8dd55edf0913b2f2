//! Per-channel receipts of items with channels (job kind `multi`, and `service`
//! items whose handler reports channels): what one run reports per channel, the
//! item's outcome from it, how that travels from the child to the dispatcher (a
//! response header next to the outcome), what a commit writes into the item's
//! row, and how the API shows it.
//!
//! The receipts live in the item's own row (`cron_queue.receipts`), so committing
//! them with the outcome costs no extra written row. Who may change them is the
//! lease holder's commit (fenced like the outcome); `sql/commit_outcomes.sql`
//! merges what a commit carries into what is stored and never replaces a
//! `delivered` receipt, so a delivered channel is never sent again by a later
//! attempt, a replay, or a commit built from a stale claim.

use std::collections::BTreeMap;

use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, CONTROLS};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::core::batch::fields::validate_id;
use crate::core::batch::model::{ClaimedItem, ItemStatus, Outcome};
use crate::core::time::rfc3339;

/// Most channels of one item.
pub const MAX_CHANNELS: usize = 8;
/// Longest channel name, in characters: names travel in every delivery's
/// `Idempotency-Key` and in the dispatch answer's receipts header, which must stay
/// bounded ([`MAX_HEADER_BYTES`]). Otherwise the id rules apply.
pub const MAX_CHANNEL_NAME_CHARS: usize = 64;
/// A channel's error is cut to this many bytes in the receipts header (it ends up
/// in the stored receipt, not in a report).
pub const MAX_REASON_BYTES: usize = 200;
/// Response header of `POST /internal/run` carrying one run's channel results.
pub const HEADER: &str = "Fanout-Receipts";
/// Upper bound of that header's value. The largest possible value — 8 names of 64
/// four-byte characters and 8 reasons of 200 bytes, all percent-encoded — stays
/// under it (`the_largest_receipts_fit_the_header_bound`), well under the
/// platform's header limits.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;
/// What the header value cannot carry raw (as for the dispatched item,
/// `core::dispatch`): controls, `%`, and every non-ASCII byte.
const ESCAPES: &AsciiSet = &CONTROLS.add(b'%');

pub use crate::core::batch::model::ChannelResults;

/// One channel's receipt as stored and shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum Receipt {
    /// Answered 2xx at `at` (ms): never sent again.
    Delivered { at: i64 },
    /// Not delivered yet; the item will try it again. `error`: why the last try failed.
    Pending { error: String },
    /// Not delivered, and the item ended `failed`: a permanent failure of this
    /// channel, or the item's attempts ran out (`error`: its last failure).
    Failed { error: String },
}

/// Receipts by channel name.
pub type Receipts = BTreeMap<String, Receipt>;

/// Stored receipts (`None`: nothing stored yet). Unreadable text reads as none:
/// every channel is then sent again, a duplicate rather than a loss.
pub fn parse(stored: Option<&str>) -> Receipts {
    stored
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default()
}

/// Whether `channel` is delivered according to `receipts`.
pub fn is_delivered(receipts: &Receipts, channel: &str) -> bool {
    matches!(receipts.get(channel), Some(Receipt::Delivered { .. }))
}

/// The item's outcome from the channels one run sent (those delivered before are
/// done already): done when every one was delivered, a permanent failure when one
/// failed permanently, otherwise a retry. The reason names each channel that
/// failed and why.
pub fn outcome(results: &ChannelResults) -> Outcome {
    outcome_beside(None, results)
}

/// [`outcome`] with the run's own outcome beside its channels' (a `service`
/// handler that answered a failure status with them): one more entry of the same
/// rule, its reason first and unnamed.
pub fn outcome_beside(own: Option<&Outcome>, results: &ChannelResults) -> Outcome {
    let entries = own
        .map(|o| (None, o))
        .into_iter()
        .chain(results.iter().map(|(name, o)| (Some(name), o)));
    let (mut permanent, mut transient) = (Vec::new(), Vec::new());
    for (name, o) in entries {
        let said = |why: &str| match name {
            Some(name) => format!("channel {name}: {why}"),
            None => why.to_string(),
        };
        match o {
            Outcome::Fail(why) => permanent.push(said(why)),
            Outcome::Retry(why) => transient.push(said(why)),
            Outcome::Done => {}
        }
    }
    if !permanent.is_empty() {
        permanent.extend(transient);
        Outcome::Fail(permanent.join("; "))
    } else if !transient.is_empty() {
        Outcome::Retry(transient.join("; "))
    } else {
        Outcome::Done
    }
}

/// A channel's name, wherever one is given (a `multi` payload, a `service`
/// answer): the id rules, at most [`MAX_CHANNEL_NAME_CHARS`] characters.
pub fn check_name(field: &str, name: &str) -> Result<(), String> {
    validate_id(field, name).map_err(|e| e.public_message())?;
    let chars = name.chars().count();
    if chars > MAX_CHANNEL_NAME_CHARS {
        return Err(format!(
            "{field} must be at most {MAX_CHANNEL_NAME_CHARS} characters, got {chars}"
        ));
    }
    Ok(())
}

/// The channels a run reports in JSON (a `service` handler's answer):
/// `{"<name>": {"outcome": "done" | "retry" | "fail", "reason": "…"}}`, as
/// [`Outcome`] serialises (a retry or failure has a reason of at most
/// [`MAX_REASON_BYTES`], done none), each name as [`check_name`] says. With the
/// channels the item has receipts for (`stored`), at most [`MAX_CHANNELS`] names:
/// an item's receipts stay as bounded as a `multi` item's. Errors name the field.
pub fn parse_reported(value: &Value, stored: &Receipts) -> Result<ChannelResults, String> {
    let Some(entries) = value.as_object() else {
        return Err(format!(
            "channels must be an object {{\"<name>\": {{\"outcome\": \"done\" | \"retry\" | \"fail\", \"reason\": \"…\"}}}}, got {}",
            json_type(value)
        ));
    };
    let mut results = ChannelResults::new();
    for (name, entry) in entries {
        let field = format!(
            "channels[{}]",
            Value::from(cut_to(name, MAX_CHANNEL_NAME_CHARS * 4))
        );
        check_name(&field, name)?;
        let outcome = Outcome::deserialize(entry).map_err(|e| format!("{field}: {e}"))?;
        if let Outcome::Retry(reason) | Outcome::Fail(reason) = &outcome {
            if reason.len() > MAX_REASON_BYTES {
                return Err(format!(
                    "{field}.reason must be at most {MAX_REASON_BYTES} bytes, got {}",
                    reason.len()
                ));
            }
        }
        results.insert(name.clone(), outcome);
    }
    let known = stored
        .keys()
        .chain(results.keys().filter(|n| !stored.contains_key(*n)));
    let count = known.count();
    if count > MAX_CHANNELS {
        return Err(format!(
            "channels: an item has at most {MAX_CHANNELS} channels, these and the earlier attempts' name {count}"
        ));
    }
    Ok(results)
}

/// A JSON value's type, for an error message.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// One channel's result in a run: its answer, or, when it had none within the
/// channel deadline (`timing::channel_deadline_ms`, `deadline_ms`), a transient
/// failure of that channel alone, so the others' results are still committed.
pub fn answered_or_timed_out(answer: Option<Outcome>, deadline_ms: i64) -> Outcome {
    answer.unwrap_or_else(|| Outcome::Retry(format!("timed out after {deadline_ms} ms")))
}

/// The receipts a commit writes for one settled run of `item`, as JSON, or `None`
/// when it changes none: each channel the run sent (delivered at `now`, or its
/// error: `pending` while the item will try again, `failed` once it ends
/// `failed`), and when the item ends `failed`, the channels still pending from
/// earlier runs become `failed` with their last error. Errors are cut to
/// [`MAX_REASON_BYTES`] (inline runs do not pass the header). The store merges
/// this into what is stored and keeps delivered channels delivered whatever it
/// says.
pub fn settle(
    item: &ClaimedItem,
    results: Option<&ChannelResults>,
    status: ItemStatus,
    now: i64,
) -> Option<String> {
    let ends_failed = status == ItemStatus::Failed;
    let mut entries = Receipts::new();
    for (name, o) in results.into_iter().flatten() {
        let receipt = match o {
            Outcome::Done => Receipt::Delivered { at: now },
            Outcome::Retry(error) if !ends_failed => Receipt::Pending {
                error: cut_to(error, MAX_REASON_BYTES),
            },
            Outcome::Retry(error) | Outcome::Fail(error) => Receipt::Failed {
                error: cut_to(error, MAX_REASON_BYTES),
            },
        };
        entries.insert(name.clone(), receipt);
    }
    if ends_failed && item.receipts.is_some() {
        for (name, old) in parse(item.receipts.as_deref()) {
            if let Receipt::Pending { error } = old {
                entries.entry(name).or_insert(Receipt::Failed { error });
            }
        }
    }
    (!entries.is_empty()).then(|| serde_json::to_string(&entries).expect("plain data"))
}

/// The receipts header value for one run's results: JSON
/// (`{"<channel>": {"outcome": "done"|"retry"|"fail", "reason": …}}`, as
/// [`Outcome`] serialises), reasons cut to [`MAX_REASON_BYTES`], percent-encoded
/// where a header cannot carry it raw. At most [`MAX_HEADER_BYTES`] for any results
/// of a valid item (at most [`MAX_CHANNELS`] names of at most
/// [`MAX_CHANNEL_NAME_CHARS`]).
pub fn encode_header(results: &ChannelResults) -> String {
    let cut: ChannelResults = results
        .iter()
        .map(|(name, o)| {
            let o = match o {
                Outcome::Done => Outcome::Done,
                Outcome::Retry(r) => Outcome::Retry(cut_to(r, MAX_REASON_BYTES)),
                Outcome::Fail(r) => Outcome::Fail(cut_to(r, MAX_REASON_BYTES)),
            };
            (name.clone(), o)
        })
        .collect();
    let json = serde_json::to_string(&cut).expect("plain data");
    utf8_percent_encode(&json, ESCAPES).to_string()
}

/// One run's results back from the header value.
pub fn decode_header(value: &str) -> Result<ChannelResults, String> {
    if value.len() > MAX_HEADER_BYTES {
        return Err(format!(
            "{HEADER} is {} bytes, more than {MAX_HEADER_BYTES}",
            value.len()
        ));
    }
    let json: Vec<u8> = percent_decode_str(value).collect();
    serde_json::from_slice(&json).map_err(|e| format!("{HEADER}: {e}"))
}

/// Receipts as `GET /batches/{id}/items` shows them: times as RFC 3339 text.
/// Nothing stored is `null` for an item of a kind without channels of its own
/// (a `service` item whose handler never reported one) and `{}` for one with
/// (a `multi` item before its first run).
pub fn view(stored: Option<&str>, has_channels: bool) -> Value {
    if stored.is_none() && !has_channels {
        return Value::Null;
    }
    let shown: Map<String, Value> = parse(stored)
        .into_iter()
        .map(|(name, r)| {
            let v = match r {
                Receipt::Delivered { at } => json!({"status": "delivered", "at": rfc3339(at)}),
                Receipt::Pending { error } => json!({"status": "pending", "error": error}),
                Receipt::Failed { error } => json!({"status": "failed", "error": error}),
            };
            (name, v)
        })
        .collect();
    Value::Object(shown)
}

/// `text` cut to at most `max` bytes on a character boundary.
fn cut_to(text: &str, max: usize) -> String {
    crate::core::batch::model::cut_on_char_boundary(text, max).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(receipts: Option<&str>) -> ClaimedItem {
        ClaimedItem {
            item_id: 7,
            lease_token: "t".into(),
            batch_id: "b".into(),
            subject_id: "s".into(),
            attempt: 1,
            max_attempts: 3,
            kind: "multi".into(),
            payload: "{}".into(),
            receipts: receipts.map(str::to_string),
            given_back: 0,
            limits: None,
            start_at: 0,
            refused_since: None,
        }
    }

    fn results(pairs: &[(&str, Outcome)]) -> ChannelResults {
        pairs
            .iter()
            .map(|(n, o)| (n.to_string(), o.clone()))
            .collect()
    }

    #[test]
    fn a_channel_that_times_out_keeps_the_delivered_ones() {
        let r: ChannelResults = [("email", Some(Outcome::Done)), ("push", None)]
            .into_iter()
            .map(|(n, a)| (n.to_string(), answered_or_timed_out(a, 750)))
            .collect();
        assert_eq!(
            outcome(&r),
            Outcome::Retry("channel push: timed out after 750 ms".into())
        );
        let stored = settle(&item(None), Some(&r), ItemStatus::Pending, 5).unwrap();
        assert_eq!(
            parse(Some(&stored)),
            Receipts::from([
                ("email".to_string(), Receipt::Delivered { at: 5 }),
                (
                    "push".to_string(),
                    Receipt::Pending {
                        error: "timed out after 750 ms".into()
                    }
                ),
            ])
        );
        // Out of attempts: the timed-out channel ends failed, saying so.
        let last = settle(&item(Some(&stored)), Some(&r), ItemStatus::Failed, 9).unwrap();
        assert_eq!(
            parse(Some(&last))["push"],
            Receipt::Failed {
                error: "timed out after 750 ms".into()
            }
        );
    }

    fn stored(text: &str) -> Receipts {
        parse(Some(text))
    }

    #[test]
    fn the_outcome_is_done_only_when_every_channel_sent_was_delivered() {
        let done = results(&[("email", Outcome::Done), ("push", Outcome::Done)]);
        assert_eq!(outcome(&done), Outcome::Done);
        // Nothing left to send (every channel delivered before): done.
        assert_eq!(outcome(&ChannelResults::new()), Outcome::Done);
        let retry = results(&[
            ("email", Outcome::Done),
            ("push", Outcome::Retry("HTTP 503".into())),
        ]);
        assert_eq!(
            outcome(&retry),
            Outcome::Retry("channel push: HTTP 503".into())
        );
        let fail = results(&[
            ("a", Outcome::Retry("HTTP 503".into())),
            ("b", Outcome::Fail("HTTP 404".into())),
        ]);
        assert_eq!(
            outcome(&fail),
            Outcome::Fail("channel b: HTTP 404; channel a: HTTP 503".into())
        );
    }

    #[test]
    fn a_run_settles_each_channel_it_sent() {
        let r = results(&[
            ("email", Outcome::Done),
            ("push", Outcome::Retry("HTTP 503".into())),
        ]);
        let json = settle(&item(None), Some(&r), ItemStatus::Pending, 1_000).unwrap();
        assert_eq!(
            stored(&json),
            Receipts::from([
                ("email".into(), Receipt::Delivered { at: 1_000 }),
                (
                    "push".into(),
                    Receipt::Pending {
                        error: "HTTP 503".into()
                    }
                ),
            ])
        );
        assert_eq!(
            json,
            r#"{"email":{"status":"delivered","at":1000},"push":{"status":"pending","error":"HTTP 503"}}"#
        );
    }

    #[test]
    fn an_item_that_ends_failed_fails_every_channel_not_delivered() {
        // Its last run: push failed again (the attempts ran out); sms was left
        // pending by an earlier run that this one did not reach (timed out).
        let before = r#"{"email":{"status":"delivered","at":5},"sms":{"status":"pending","error":"HTTP 502"}}"#;
        let r = results(&[("push", Outcome::Retry("HTTP 503".into()))]);
        let json = settle(&item(Some(before)), Some(&r), ItemStatus::Failed, 9).unwrap();
        assert_eq!(
            stored(&json),
            Receipts::from([
                (
                    "push".into(),
                    Receipt::Failed {
                        error: "HTTP 503".into()
                    }
                ),
                (
                    "sms".into(),
                    Receipt::Failed {
                        error: "HTTP 502".into()
                    }
                ),
            ]),
            "delivered channels are left to the stored receipts"
        );
        // A run that never answered (no results) on the last attempt still fails them.
        let json = settle(&item(Some(before)), None, ItemStatus::Failed, 9).unwrap();
        assert_eq!(
            stored(&json),
            Receipts::from([(
                "sms".into(),
                Receipt::Failed {
                    error: "HTTP 502".into()
                }
            )])
        );
    }

    #[test]
    fn nothing_to_write_is_none() {
        assert_eq!(settle(&item(None), None, ItemStatus::Pending, 1), None);
        assert_eq!(
            settle(
                &item(None),
                Some(&ChannelResults::new()),
                ItemStatus::Completed,
                1
            ),
            None
        );
        let delivered = r#"{"email":{"status":"delivered","at":5}}"#;
        assert_eq!(
            settle(&item(Some(delivered)), None, ItemStatus::Failed, 1),
            None
        );
    }

    #[test]
    fn results_round_trip_through_the_header() {
        let r = results(&[
            ("email", Outcome::Done),
            (
                "pūsh \"x\"",
                Outcome::Retry("HTTP 503: naïve\r\n100%".into()),
            ),
            ("sms", Outcome::Fail("HTTP 400".into())),
        ]);
        let value = encode_header(&r);
        assert!(
            value.bytes().all(|b| b == b' ' || b.is_ascii_graphic()),
            "{value}"
        );
        assert_eq!(decode_header(&value), Ok(r));
        assert!(decode_header("%7Bnot json").is_err());
        assert!(decode_header(&"a".repeat(MAX_HEADER_BYTES + 1)).is_err());
    }

    #[test]
    fn the_largest_receipts_fit_the_header_bound() {
        // Four-byte characters cost 12 header bytes each once percent-encoded.
        let name = |i: usize| format!("{i}{}", "𝄞".repeat(MAX_CHANNEL_NAME_CHARS - 1));
        let reason = "é".repeat(MAX_REASON_BYTES / 2);
        let r: ChannelResults = (0..MAX_CHANNELS)
            .map(|i| (name(i), Outcome::Fail(reason.clone())))
            .collect();
        let value = encode_header(&r);
        assert!(value.len() <= MAX_HEADER_BYTES, "{} bytes", value.len());
        assert_eq!(decode_header(&value), Ok(r));
        // Longer reasons are cut on a character boundary.
        let long = results(&[("a", Outcome::Retry("é".repeat(1_000)))]);
        match &decode_header(&encode_header(&long)).unwrap()["a"] {
            Outcome::Retry(r) => assert_eq!(r.len(), MAX_REASON_BYTES),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_view_shows_times_as_text_and_null_for_kinds_without_channels() {
        let text = r#"{"email":{"status":"delivered","at":1795000000123},"push":{"status":"failed","error":"HTTP 400"}}"#;
        assert_eq!(
            view(Some(text), true),
            json!({"email": {"status": "delivered", "at": "2026-11-18T11:06:40.123Z"},
                   "push": {"status": "failed", "error": "HTTP 400"}})
        );
        assert_eq!(view(None, true), json!({}));
        assert_eq!(view(None, false), Value::Null);
        // A kind without channels of its own whose run reported some (`service`).
        assert_eq!(view(Some(text), false), view(Some(text), true));
    }

    #[test]
    fn reported_channels_parse_as_the_header_does_and_are_checked_as_names() {
        let reported = json!({"discord": {"outcome": "done"},
                              "telegram": {"outcome": "retry", "reason": "HTTP 429"},
                              "sms": {"outcome": "fail", "reason": "HTTP 400"}});
        let r = parse_reported(&reported, &Receipts::new()).unwrap();
        assert_eq!(
            r,
            results(&[
                ("discord", Outcome::Done),
                ("telegram", Outcome::Retry("HTTP 429".into())),
                ("sms", Outcome::Fail("HTTP 400".into())),
            ])
        );
        // The header's shape, exactly.
        assert_eq!(decode_header(&encode_header(&r)), Ok(r));
        let refused = |value: Value| parse_reported(&value, &Receipts::new()).unwrap_err();
        assert!(refused(json!([])).starts_with("channels must be an object"));
        let e = refused(json!({"t": {"outcome": "skip"}}));
        assert!(
            e.starts_with("channels[\"t\"]: unknown variant `skip`"),
            "{e}"
        );
        let e = refused(json!({"..": {"outcome": "done"}}));
        assert_eq!(e, "channels[\"..\"] must not be \".\" or \"..\"");
        let e = refused(json!({"t": {"outcome": "retry", "reason": "x".repeat(201)}}));
        assert_eq!(
            e,
            "channels[\"t\"].reason must be at most 200 bytes, got 201"
        );
        assert!(parse_reported(
            &json!({"t": {"outcome": "retry", "reason": "x".repeat(200)}}),
            &Receipts::new()
        )
        .is_ok());
    }

    #[test]
    fn an_items_reported_channels_with_its_receipts_are_at_most_8() {
        let stored =
            stored(r#"{"a":{"status":"delivered","at":1},"b":{"status":"pending","error":"x"}}"#);
        let names = |n: usize| -> Value {
            (0..n)
                .map(|i| (format!("c{i}"), json!({"outcome": "done"})))
                .collect::<Map<String, Value>>()
                .into()
        };
        assert!(parse_reported(&names(6), &stored).is_ok());
        assert!(parse_reported(&names(7), &stored)
            .unwrap_err()
            .contains("at most 8 channels"));
        // Names it has receipts for count once.
        let again = json!({"a": {"outcome": "done"}, "b": {"outcome": "done"}});
        let mut seven = names(6).as_object().unwrap().clone();
        seven.extend(again.as_object().unwrap().clone());
        assert!(parse_reported(&Value::Object(seven), &stored).is_ok());
    }

    #[test]
    fn the_runs_own_outcome_beside_its_channels_is_one_more_entry_of_the_rule() {
        let delivered = results(&[("discord", Outcome::Done)]);
        let retry = Outcome::Retry("HTTP 503".into());
        assert_eq!(outcome_beside(Some(&retry), &delivered), retry);
        assert_eq!(outcome_beside(None, &delivered), Outcome::Done);
        let mixed = results(&[
            ("discord", Outcome::Done),
            ("telegram", Outcome::Fail("HTTP 400".into())),
        ]);
        assert_eq!(
            outcome_beside(Some(&retry), &mixed),
            Outcome::Fail("channel telegram: HTTP 400; HTTP 503".into())
        );
        let fail = Outcome::Fail("HTTP 422".into());
        assert_eq!(
            outcome_beside(
                Some(&fail),
                &results(&[("t", Outcome::Retry("429".into()))])
            ),
            Outcome::Fail("HTTP 422; channel t: 429".into())
        );
    }
}
