//! Request bodies and query strings of the HTTP API: parsed strictly (unknown
//! fields are errors) and validated completely before anything is written.

use std::collections::HashSet;

use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

use crate::core::batch::callback::OnFinish;
pub use crate::core::batch::fields::{
    parse_json, parse_priority, validate_id, MAX_BODY_BYTES, MAX_ID_CHARS, MAX_PRIORITY,
    MIN_PRIORITY,
};
use crate::core::batch::model::ItemStatus;
use crate::core::error::ApiError;
use crate::core::flow::limits::{keys_json, merge_keys, parse_keys};
use crate::core::schedule::body::validate_group;
use crate::core::schedule::key::adhoc_key_prefix;
use crate::core::schedule::zone::{validate_timezone, DEFAULT_ZONE};

pub const MAX_SUBJECTS_PER_CALL: usize = 1_000;
pub const MAX_PAGE: i64 = 1_000;
/// Largest payload of a subject or item, as compact JSON (as stored). The payload
/// travels to the child inside the item's JSON, as a JSON string: escaping can
/// double it (every `"` and `\` gains a backslash), so 100 KiB becomes at most
/// 200 KiB plus the item's other fields, under the child's MAX_BODY_BYTES
/// (`the_largest_payload_always_fits_the_dispatch`).
pub const MAX_PAYLOAD_BYTES: usize = 100 * 1024;
pub const DEFAULT_PAGE: i64 = 100;
/// A subject's group when `PUT /subjects` names none.
pub const DEFAULT_GROUP: &str = "default";

/// Checks a job kind and its payload, and answers the limit keys the kind adds
/// for it (`Job::limit_keys`); supplied by the job registry.
pub type PayloadCheck<'a> = &'a dyn Fn(&str, &Value) -> Result<Vec<String>, String>;

/// Serialised (into the JSON parameter of `sql/upsert_subjects.sql`) as the statement
/// reads it: the payload as the compact JSON text stored, `active` as a boolean
/// (SQLite's `->>` reads it as 1 or 0).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SubjectInput {
    pub id: String,
    pub kind: String,
    #[serde(serialize_with = "json_text")]
    pub payload: Value,
    #[serde(default = "default_true")]
    pub active: bool,
    /// What a schedule's `group` selects; the id rules apply.
    #[serde(default = "default_group")]
    pub group: String,
    /// IANA zone name, read by schedules on `"timezone": "subject"`.
    #[serde(default = "default_timezone")]
    pub timezone: String,
    /// `limits` as sent: read by validation only ([`SubjectInput::keys`]).
    #[serde(default, skip_serializing)]
    pub limits: Option<Value>,
    /// The limit keys it holds, set by validation: its `limits`, then its kind's
    /// (`Job::limit_keys`), each once. Stored (and copied to its items) as a JSON
    /// array's text, NULL when none.
    #[serde(
        skip_deserializing,
        rename(serialize = "limits"),
        serialize_with = "keys_text"
    )]
    pub keys: Vec<String>,
}

fn default_true() -> bool {
    true
}

fn default_group() -> String {
    DEFAULT_GROUP.to_string()
}

fn default_timezone() -> String {
    DEFAULT_ZONE.to_string()
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PutSubjects {
    pub subjects: Vec<SubjectInput>,
}

/// Serialised (into the JSON parameter of `sql/enqueue_items.sql`) with the payload
/// as the compact JSON text stored.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ItemInput {
    pub subject_id: String,
    pub kind: String,
    #[serde(serialize_with = "json_text")]
    pub payload: Value,
    /// `limits` as sent: read by validation only ([`ItemInput::keys`]).
    #[serde(default, skip_serializing)]
    pub limits: Option<Value>,
    /// The limit keys it holds, set by validation: its `limits`, then its kind's,
    /// each once; stored as a JSON array's text, NULL when none.
    #[serde(
        skip_deserializing,
        rename(serialize = "limits"),
        serialize_with = "keys_text"
    )]
    pub keys: Vec<String>,
}

/// A payload as the text the queue stores and sends: compact JSON.
fn json_text<S: Serializer>(payload: &Value, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&payload.to_string())
}

/// Limit keys as the tables store them: a JSON array's text, or null for none
/// (`core::limits::keys_json`).
fn keys_text<S: Serializer>(keys: &[String], s: S) -> Result<S::Ok, S::Error> {
    keys_json(keys).serialize(s)
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateBatchBody {
    pub key: Option<String>,
    pub source: Option<String>,
    pub items: Option<Vec<ItemInput>>,
    /// The completion callback (`core::callback`), validated with the target
    /// policy by the handler.
    pub on_finish: Option<OnFinish>,
    /// Read by [`parse_priority`] (any JSON, so a wrong type is
    /// `invalid_priority` too).
    pub priority: Option<Value>,
}

/// A validated `POST /batches`.
#[derive(Debug, Clone, PartialEq)]
pub enum CreateBatch {
    FromSubjects {
        key: Option<String>,
    },
    FromItems {
        key: Option<String>,
        items: Vec<ItemInput>,
    },
}

/// The kind's own check, then the size every kind shares ([`MAX_PAYLOAD_BYTES`]);
/// the limit keys the kind adds for the payload.
fn check_payload(
    check: PayloadCheck,
    field: &str,
    kind: &str,
    payload: &Value,
) -> Result<Vec<String>, ApiError> {
    let bad = |msg: String| ApiError::bad_request("invalid_payload", format!("{field}: {msg}"));
    let from_kind = check(kind, payload).map_err(bad)?;
    let size = payload.to_string().len();
    if size > MAX_PAYLOAD_BYTES {
        return Err(bad(format!(
            "payload is {size} bytes as JSON; at most {MAX_PAYLOAD_BYTES} (escaped into the dispatched item it must fit the child's {MAX_BODY_BYTES}-byte limit)"
        )));
    }
    Ok(from_kind)
}

/// The limit keys a subject or item holds: its `limits` as sent (0 to 4 keys),
/// then those its kind adds (`from_kind`), each once. 400 `invalid_limits`
/// naming `field` otherwise.
fn item_keys(
    field: &str,
    limits: Option<&Value>,
    from_kind: &[String],
) -> Result<Vec<String>, ApiError> {
    let bad = |msg: String| ApiError::bad_request("invalid_limits", format!("{field}.{msg}"));
    let own = parse_keys(limits).map_err(|e| bad(e.public_message()))?;
    merge_keys(&own, from_kind).map_err(|e| bad(format!("limits: {e}")))
}

/// Validate every subject of a `PUT /subjects` before any is written, and set
/// the limit keys each holds ([`SubjectInput::keys`]).
pub fn validate_put_subjects(req: &mut PutSubjects, check: PayloadCheck) -> Result<(), ApiError> {
    if req.subjects.is_empty() {
        return Err(ApiError::bad_request("empty", "subjects must not be empty"));
    }
    if req.subjects.len() > MAX_SUBJECTS_PER_CALL {
        return Err(ApiError::bad_request(
            "too_many",
            format!(
                "at most {MAX_SUBJECTS_PER_CALL} subjects per call, got {}",
                req.subjects.len()
            ),
        ));
    }
    let mut seen = HashSet::new();
    for (i, s) in req.subjects.iter_mut().enumerate() {
        validate_id(&format!("subjects[{i}].id"), &s.id)?;
        if !seen.insert(s.id.clone()) {
            return Err(ApiError::bad_request(
                "duplicate_id",
                format!("subjects[{i}].id {:?} appears twice", s.id),
            ));
        }
        validate_group(&format!("subjects[{i}].group"), &s.group)?;
        validate_timezone(&format!("subjects[{i}].timezone"), &s.timezone)?;
        let field = format!("subjects[{i}]");
        let from_kind = check_payload(check, &field, &s.kind, &s.payload)?;
        s.keys = item_keys(&field, s.limits.as_ref(), &from_kind)?;
    }
    Ok(())
}

/// Validate a `POST /batches` body into one of its two shapes, explicit items
/// with the limit keys each holds ([`ItemInput::keys`]). `daily:` keys are
/// refused here; keys under another schedule's prefix need the store
/// (`api::batches`); `priority` and `on_finish` are the handler's.
pub fn validate_create_batch(
    body: CreateBatchBody,
    check: PayloadCheck,
) -> Result<CreateBatch, ApiError> {
    if let Some(key) = &body.key {
        validate_id("key", key)?;
        adhoc_key_prefix(key)?;
    }
    match (body.source.as_deref(), body.items) {
        (Some("subjects"), None) => Ok(CreateBatch::FromSubjects { key: body.key }),
        (Some(other), None) => Err(ApiError::bad_request(
            "invalid_source",
            format!("source must be \"subjects\", got {other:?}"),
        )),
        (None, Some(mut items)) => {
            if items.is_empty() {
                return Err(ApiError::bad_request("empty", "items must not be empty"));
            }
            let mut seen = HashSet::new();
            for (i, item) in items.iter_mut().enumerate() {
                validate_id(&format!("items[{i}].subject_id"), &item.subject_id)?;
                if !seen.insert(item.subject_id.clone()) {
                    return Err(ApiError::bad_request(
                        "duplicate_id",
                        format!("items[{i}].subject_id {:?} appears twice", item.subject_id),
                    ));
                }
                let field = format!("items[{i}]");
                let from_kind = check_payload(check, &field, &item.kind, &item.payload)?;
                item.keys = item_keys(&field, item.limits.as_ref(), &from_kind)?;
            }
            Ok(CreateBatch::FromItems {
                key: body.key,
                items,
            })
        }
        _ => Err(ApiError::bad_request(
            "invalid_batch",
            "give exactly one of \"source\": \"subjects\" or \"items\": [...]",
        )),
    }
}

/// `?limit=&after=&status=` of the listing routes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageQuery {
    pub limit: i64,
    pub after: String,
    pub status: Option<ItemStatus>,
}

/// Parse listing query pairs; unknown parameters are errors, like unknown fields.
pub fn parse_page_query(
    pairs: &[(String, String)],
    allow_status: bool,
) -> Result<PageQuery, ApiError> {
    let mut q = PageQuery {
        limit: DEFAULT_PAGE,
        after: String::new(),
        status: None,
    };
    for (name, value) in pairs {
        match name.as_str() {
            "limit" => {
                q.limit = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_PAGE).contains(n))
                    .ok_or_else(|| {
                        ApiError::bad_request(
                            "invalid_query",
                            format!("limit must be 1 to {MAX_PAGE}"),
                        )
                    })?
            }
            "after" => q.after = value.clone(),
            "status" if allow_status => {
                q.status = Some(ItemStatus::parse(value).ok_or_else(|| {
                    let all: Vec<&str> = ItemStatus::ALL.iter().map(|s| s.as_str()).collect();
                    ApiError::bad_request(
                        "invalid_query",
                        format!("status must be one of {}", all.join(", ")),
                    )
                })?)
            }
            other => {
                return Err(ApiError::bad_request(
                    "invalid_query",
                    format!("unknown query parameter {other:?}"),
                ))
            }
        }
    }
    Ok(q)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn accept_webhook(kind: &str, _: &Value) -> Result<Vec<String>, String> {
        if kind == "webhook" {
            Ok(Vec::new())
        } else {
            Err(format!("unknown kind {kind:?}"))
        }
    }

    fn subjects(v: Value) -> Result<PutSubjects, ApiError> {
        parse_json(v.to_string().as_bytes())
    }

    #[test]
    fn unknown_fields_and_wrong_types_are_invalid_json() {
        let e = subjects(json!({"subjects": [], "extra": 1})).unwrap_err();
        assert_eq!(e.code(), "invalid_json");
        assert!(
            e.public_message().contains("extra"),
            "{}",
            e.public_message()
        );
        let e = subjects(json!({"subjects": [{"id": 5, "kind": "webhook", "payload": {}}]}))
            .unwrap_err();
        assert_eq!(e.code(), "invalid_json");
        assert_eq!(
            parse_json::<PutSubjects>(b"{not json").unwrap_err().code(),
            "invalid_json"
        );
    }

    #[test]
    fn oversized_bodies_are_413_before_parsing() {
        let big = vec![b' '; MAX_BODY_BYTES + 1];
        assert_eq!(parse_json::<PutSubjects>(&big).unwrap_err().status(), 413);
    }

    #[test]
    fn active_group_and_timezone_have_defaults() {
        let req =
            subjects(json!({"subjects": [{"id": "a", "kind": "webhook", "payload": {}}]})).unwrap();
        let s = &req.subjects[0];
        assert!(s.active);
        assert_eq!((s.group.as_str(), s.timezone.as_str()), ("default", "UTC"));
    }

    #[test]
    fn group_and_timezone_are_validated_with_the_subject() {
        let check = |v: Value| validate_put_subjects(&mut subjects(v).unwrap(), &accept_webhook);
        let one = |group: &str, zone: &str| {
            json!({"subjects": [{"id": "a", "kind": "webhook", "payload": {},
                                 "group": group, "timezone": zone}]})
        };
        assert!(check(one("digest", "Pacific/Kiritimati")).is_ok());
        assert!(check(one("digest", "America/Argentina/Buenos_Aires")).is_ok());
        let e = check(one("digest", "Mars/Olympus")).unwrap_err();
        assert_eq!(e.code(), "invalid_timezone");
        assert!(
            e.public_message().contains("subjects[0].timezone"),
            "{}",
            e.public_message()
        );
        for zone in ["", "europe/berlin", "subject", "+02:00"] {
            assert_eq!(
                check(one("g", zone)).unwrap_err().code(),
                "invalid_timezone",
                "{zone:?}"
            );
        }
        let e = check(one("", "UTC")).unwrap_err();
        assert_eq!(e.code(), "invalid_id");
        assert!(
            e.public_message().contains("subjects[0].group"),
            "{}",
            e.public_message()
        );
        assert_eq!(
            check(one("tab\tgroup", "UTC")).unwrap_err().code(),
            "invalid_id"
        );
        assert_eq!(
            check(one(&"g".repeat(201), "UTC")).unwrap_err().code(),
            "invalid_id"
        );
        assert_eq!(
            subjects(
                json!({"subjects": [{"id": "a", "kind": "webhook", "payload": {}, "group": 1}]})
            )
            .unwrap_err()
            .code(),
            "invalid_json"
        );
    }

    #[test]
    fn subject_validation_covers_ids_counts_duplicates_and_kinds() {
        let one = |id: &str, kind: &str| json!({"id": id, "kind": kind, "payload": {}});
        let check = |v: Value| validate_put_subjects(&mut subjects(v).unwrap(), &accept_webhook);

        assert_eq!(check(json!({"subjects": []})).unwrap_err().code(), "empty");
        assert_eq!(
            check(json!({"subjects": [one("", "webhook")]}))
                .unwrap_err()
                .code(),
            "invalid_id"
        );
        let long = "x".repeat(MAX_ID_CHARS + 1);
        assert_eq!(
            check(json!({"subjects": [one(&long, "webhook")]}))
                .unwrap_err()
                .code(),
            "invalid_id"
        );
        let max = "é".repeat(MAX_ID_CHARS);
        assert!(
            check(json!({"subjects": [one(&max, "webhook")]})).is_ok(),
            "200 chars, not bytes"
        );
        assert_eq!(
            check(json!({"subjects": [one("a", "webhook"), one("a", "webhook")]}))
                .unwrap_err()
                .code(),
            "duplicate_id"
        );
        let e = check(json!({"subjects": [one("a", "email")]})).unwrap_err();
        assert_eq!(e.code(), "invalid_payload");
        assert!(e.public_message().contains("email"));
        let many: Vec<Value> = (0..=MAX_SUBJECTS_PER_CALL)
            .map(|i| one(&i.to_string(), "webhook"))
            .collect();
        assert_eq!(
            check(json!({ "subjects": many })).unwrap_err().code(),
            "too_many"
        );
    }

    #[test]
    fn create_batch_takes_exactly_one_source() {
        let parse = |v: Value| {
            validate_create_batch(parse_json(v.to_string().as_bytes())?, &accept_webhook)
        };
        assert_eq!(
            parse(json!({"source": "subjects"})).unwrap(),
            CreateBatch::FromSubjects { key: None }
        );
        let items = json!([{"subject_id": "a", "kind": "webhook", "payload": {}}]);
        assert!(matches!(
            parse(json!({"key": "k1", "items": items})).unwrap(),
            CreateBatch::FromItems { key: Some(_), .. }
        ));
        assert_eq!(parse(json!({})).unwrap_err().code(), "invalid_batch");
        assert_eq!(
            parse(json!({"source": "subjects", "items": items}))
                .unwrap_err()
                .code(),
            "invalid_batch"
        );
        assert_eq!(
            parse(json!({"source": "users"})).unwrap_err().code(),
            "invalid_source"
        );
        assert_eq!(parse(json!({"items": []})).unwrap_err().code(), "empty");
        assert_eq!(
            parse(json!({"key": "daily:2026-01-01", "source": "subjects"}))
                .unwrap_err()
                .code(),
            "reserved_key"
        );
        let dup = json!([{"subject_id": "a", "kind": "webhook", "payload": {}}, {"subject_id": "a", "kind": "webhook", "payload": {}}]);
        assert_eq!(
            parse(json!({"items": dup})).unwrap_err().code(),
            "duplicate_id"
        );
    }

    /// The worst payload of the maximum size, in the worst item (longest ids of
    /// the characters that escape the most, the largest receipts a multi-channel
    /// item can store), still fits the child's body limit.
    #[test]
    fn the_largest_payload_always_fits_the_dispatch() {
        use crate::core::batch::model::{ClaimedItem, ItemStatus, Outcome};
        use crate::core::batch::receipts::{
            self, MAX_CHANNELS, MAX_CHANNEL_NAME_CHARS, MAX_REASON_BYTES,
        };
        // Every channel failed, with names and errors of quotes (stored errors are
        // cut to MAX_REASON_BYTES, names capped).
        let channels: receipts::ChannelResults = (0..MAX_CHANNELS)
            .map(|i| {
                let name = format!("{i}{}", "\"".repeat(MAX_CHANNEL_NAME_CHARS - 1));
                (name, Outcome::Fail("\"".repeat(MAX_REASON_BYTES * 4)))
            })
            .collect();
        // A JSON string of quotes: every byte of its text is `"` or `\`.
        let quotes = "\"".repeat((MAX_PAYLOAD_BYTES - 2) / 2);
        let payload = Value::String(quotes).to_string();
        assert!(payload.len() <= MAX_PAYLOAD_BYTES && payload.len() > MAX_PAYLOAD_BYTES - 4);
        let backslashes = Value::String("\\".repeat((MAX_PAYLOAD_BYTES - 2) / 2)).to_string();
        let id = "\"".repeat(MAX_ID_CHARS);
        let wide = "😀".repeat(MAX_ID_CHARS);
        for (payload, subject_id) in [(&payload, &id), (&backslashes, &wide)] {
            let item = ClaimedItem {
                item_id: i64::MAX,
                lease_token: format!("{}-{}", "f".repeat(32), i64::MAX),
                batch_id: "b".repeat(64),
                subject_id: subject_id.clone(),
                attempt: 100,
                max_attempts: 100,
                kind: "multi".into(),
                payload: payload.clone(),
                receipts: None,
                given_back: 0,
                limits: None,
                start_at: 0,
                refused_since: None,
            };
            let item = ClaimedItem {
                receipts: receipts::settle(&item, Some(&channels), ItemStatus::Failed, i64::MAX),
                ..item
            };
            let dispatched = serde_json::to_string(&item).unwrap();
            assert!(
                dispatched.len() > 2 * MAX_PAYLOAD_BYTES - 8,
                "escaping doubled it"
            );
            assert!(
                dispatched.len() <= MAX_BODY_BYTES,
                "{} bytes dispatched",
                dispatched.len()
            );
        }
    }

    #[test]
    fn payloads_over_the_cap_are_refused_whatever_the_kind_says() {
        let accept = |_: &str, _: &Value| Ok(Vec::new());
        let body = |n: usize| {
            parse_json::<PutSubjects>(
                json!({"subjects": [{"id": "a", "kind": "noop", "payload": {"p": "x".repeat(n)}}]})
                    .to_string()
                    .as_bytes(),
            )
            .unwrap()
        };
        // {"p":"…"} is 8 bytes around the padding.
        assert!(validate_put_subjects(&mut body(MAX_PAYLOAD_BYTES - 8), &accept).is_ok());
        let e = validate_put_subjects(&mut body(MAX_PAYLOAD_BYTES - 7), &accept).unwrap_err();
        assert_eq!(e.code(), "invalid_payload");
        assert!(e
            .public_message()
            .starts_with("subjects[0]: payload is 102401 bytes"));
    }

    /// A kind that adds `github` to every item, and `bad key` when the payload
    /// asks for it.
    fn github_kind(_: &str, payload: &Value) -> Result<Vec<String>, String> {
        let mut keys = vec!["github".to_string()];
        if payload.get("bad").is_some() {
            keys.push("bad key".into());
        }
        Ok(keys)
    }

    #[test]
    fn a_subject_holds_its_own_limit_keys_then_its_kinds() {
        let mut req = subjects(json!({"subjects": [
            {"id": "a", "kind": "k", "payload": {}, "limits": ["tenant:acme", "github"]},
            {"id": "b", "kind": "k", "payload": {}},
        ]}))
        .unwrap();
        validate_put_subjects(&mut req, &github_kind).unwrap();
        assert_eq!(
            req.subjects[0].keys,
            ["tenant:acme", "github"],
            "github once"
        );
        assert_eq!(req.subjects[1].keys, ["github"]);
        let stored: Value = serde_json::to_value(&req.subjects[0]).unwrap();
        assert_eq!(
            stored["limits"], r#"["tenant:acme","github"]"#,
            "as the upsert reads it"
        );
        let mut none =
            subjects(json!({"subjects": [{"id": "a", "kind": "webhook", "payload": {}}]})).unwrap();
        validate_put_subjects(&mut none, &accept_webhook).unwrap();
        assert_eq!(
            serde_json::to_value(&none.subjects[0]).unwrap()["limits"],
            Value::Null
        );
    }

    #[test]
    fn bad_limits_of_a_subject_or_an_item_are_invalid_limits_naming_it() {
        let subject = |limits: Value| {
            json!({"subjects": [
                {"id": "ok", "kind": "k", "payload": {}},
                {"id": "a", "kind": "k", "payload": {}, "limits": limits},
            ]})
        };
        let item = |limits: Value| {
            json!({"items": [
                {"subject_id": "ok", "kind": "k", "payload": {}},
                {"subject_id": "a", "kind": "k", "payload": {}, "limits": limits},
            ]})
        };
        for bad in [
            json!("github"),
            json!(["a", "a"]),
            json!(["a", "b", "c", "d", "e"]),
            json!(["a b"]),
            json!([""]),
            json!([1]),
            json!(["k".repeat(129)]),
            json!({"github": true}),
        ] {
            let e =
                validate_put_subjects(&mut subjects(subject(bad.clone())).unwrap(), &github_kind)
                    .unwrap_err();
            assert_eq!(e.code(), "invalid_limits", "{bad}");
            assert!(
                e.public_message().starts_with("subjects[1].limits"),
                "{}",
                e.public_message()
            );
            let body = parse_json(item(bad.clone()).to_string().as_bytes()).unwrap();
            let e = validate_create_batch(body, &github_kind).unwrap_err();
            assert_eq!(e.code(), "invalid_limits", "{bad}");
            assert!(
                e.public_message().starts_with("items[1].limits"),
                "{}",
                e.public_message()
            );
        }
        // Four of its own, and the kind's fifth: the kind's are not counted.
        let four = json!(["a", "b", "c", "d"]);
        assert!(validate_put_subjects(&mut subjects(subject(four)).unwrap(), &github_kind).is_ok());
        // A key the kind adds must be a key too.
        let mut req =
            subjects(json!({"subjects": [{"id": "a", "kind": "k", "payload": {"bad": 1}}]}))
                .unwrap();
        let e = validate_put_subjects(&mut req, &github_kind).unwrap_err();
        assert_eq!(e.code(), "invalid_limits");
        assert!(
            e.public_message().contains("bad key"),
            "{}",
            e.public_message()
        );
    }

    #[test]
    fn an_items_keys_are_its_own_then_its_kinds() {
        let body = parse_json(
            json!({"items": [{"subject_id": "a", "kind": "k", "payload": {}, "limits": ["tenant:bolt"]}]})
                .to_string()
                .as_bytes(),
        )
        .unwrap();
        let CreateBatch::FromItems { items, .. } =
            validate_create_batch(body, &github_kind).unwrap()
        else {
            panic!("items")
        };
        assert_eq!(items[0].keys, ["tenant:bolt", "github"]);
    }

    #[test]
    fn a_priority_is_an_integer_from_minus_10_to_10_default_0() {
        assert_eq!(parse_priority(None).unwrap(), 0);
        assert_eq!(parse_priority(Some(&Value::Null)).unwrap(), 0);
        for p in [-10, 0, 5, 10] {
            assert_eq!(parse_priority(Some(&json!(p))).unwrap(), p);
        }
        for bad in [
            json!(11),
            json!(-11),
            json!(1.5),
            json!("5"),
            json!(true),
            json!([1]),
        ] {
            let e = parse_priority(Some(&bad)).unwrap_err();
            assert_eq!(e.code(), "invalid_priority", "{bad}");
            assert!(
                e.public_message().contains("-10 to 10"),
                "{}",
                e.public_message()
            );
        }
    }

    #[test]
    fn page_query_defaults_bounds_and_unknowns() {
        let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        let q = parse_page_query(&pairs(&[]), true).unwrap();
        assert_eq!(
            (q.limit, q.after.as_str(), q.status),
            (DEFAULT_PAGE, "", None)
        );
        let q = parse_page_query(
            &pairs(&[("status", "failed"), ("limit", "5"), ("after", "s1")]),
            true,
        )
        .unwrap();
        assert_eq!(
            (q.limit, q.after.as_str(), q.status),
            (5, "s1", Some(ItemStatus::Failed))
        );
        for bad in [
            ("limit", "0"),
            ("limit", "1001"),
            ("limit", "x"),
            ("status", "done"),
            ("page", "2"),
        ] {
            assert_eq!(
                parse_page_query(&pairs(&[bad]), true).unwrap_err().code(),
                "invalid_query",
                "{bad:?}"
            );
        }
        assert!(parse_page_query(&pairs(&[("status", "failed")]), false).is_err());
    }
}
