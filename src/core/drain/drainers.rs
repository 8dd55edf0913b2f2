//! The message a tick sends to `DRAIN_QUEUE` for each drainer (`DRAINERS` > 1
//! or `auto`), and a drainer for its continuation, signed with `DISPATCH_SECRET`
//! so a consumer drains only for the Worker that shares its secret: a message
//! from another producer on the queue is refused and logged, never drained.
//! With `auto`, how many drainers a tick starts ([`to_start`]) from what one
//! drainer can do ([`capacity`]).

use serde::{Deserialize, Serialize};

use crate::core::drain::budget::TAIL_SUBREQUESTS;
use crate::core::security::signature::{self, SignatureError, SignatureHeader};
use crate::core::settings::{DispatchMode, Settings};

/// Most messages one `send_batch` call takes: the Queues limits page (through
/// a third-party summary, not re-checked) allows 100 a call, and `DRAINERS` and
/// `MAX_DRAINERS` go to 250, so a tick sends in calls of at most this many.
pub const SEND_BATCH_MAX: usize = 100;

/// A drainer's own D1 calls beyond its items': its slot (taken or handed on),
/// the last step that hands it on, the continuation's send, about two claims and
/// two group commits, and the tail (finish check, summary).
pub const DRAINER_OVERHEAD_SUBREQUESTS: i64 = 1 + 1 + 1 + 2 + 2 + TAIL_SUBREQUESTS;

/// Items one drainer can start: its child cap (fan-out), and what its
/// subrequest budget pays for once its own calls are kept. Its deadline is not
/// counted: how long items take is not known before they run, and a drainer
/// stopped by its deadline continues in a new invocation.
pub fn capacity(s: &Settings, per_item_cost: i64) -> i64 {
    let by_budget = (s.subrequest_budget - DRAINER_OVERHEAD_SUBREQUESTS) / per_item_cost.max(1);
    let cap = match s.dispatch_mode {
        DispatchMode::Fanout => s.max_child_invocations,
        DispatchMode::Inline => i64::MAX,
    };
    by_budget.min(cap).max(1)
}

/// How many drainers a tick starts with `auto`: enough for `due` items at
/// `capacity` each, none when nothing is due, and never more than `max` live at
/// once counting the `live` ones (their chains go on while work is due).
pub fn to_start(due: i64, live: i64, capacity: i64, max: i64) -> i64 {
    let wanted = (due.max(0) + capacity - 1) / capacity.max(1);
    wanted.min((max - live).max(0))
}

/// How many due items the tick counts (a bounded read): past what `max`
/// drainers can take, more makes no difference.
pub fn count_cap(capacity: i64, max: i64) -> i64 {
    capacity.saturating_mul(max)
}

/// How old a drain message may be. A drainer started later than this would drain
/// for a tick long gone: newer ticks have sent their own messages since.
pub const MAX_AGE_SECS: u64 = 900;

/// One drainer's message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainMessage {
    /// When the sending tick started (ms): logs tie the drainers to their tick.
    pub tick_started_at: i64,
    /// Which of the tick's drainers this is, from 1.
    pub drainer: i64,
    /// Its place in the chain (`auto`): 0 sent by the tick, k its k-th
    /// continuation.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub chain: i64,
    /// The drainer slot a continuation is handed (`auto`; 0: take a free one),
    /// and the holder name it is handed under (`drainer_slots.holder`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub slot: i64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub holder: String,
    /// `t=<unix seconds>,v1=<hex>` over [`DrainMessage::signed_text`].
    pub signature: String,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// Where a continuation goes on: its place in the chain, and the slot handed to
/// it under the holder name it was handed under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Continuation {
    pub chain: i64,
    pub slot: i64,
    pub holder: String,
}

impl DrainMessage {
    /// Drainer `drainer` of the tick started at `tick_started_at`, signed at
    /// `now_secs` (the real clock, like every signature).
    pub fn new(secret: &str, now_secs: i64, tick_started_at: i64, drainer: i64) -> DrainMessage {
        let mut m = DrainMessage {
            tick_started_at,
            drainer,
            chain: 0,
            slot: 0,
            holder: String::new(),
            signature: String::new(),
        };
        m.signature = signature::sign(secret, now_secs, m.signed_text().as_bytes());
        m
    }

    /// The continuation of this drainer's chain, signed at `now_secs`.
    pub fn continuation(&self, secret: &str, now_secs: i64, next: Continuation) -> DrainMessage {
        let mut m = DrainMessage {
            chain: next.chain,
            slot: next.slot,
            holder: next.holder,
            signature: String::new(),
            ..self.clone()
        };
        m.signature = signature::sign(secret, now_secs, m.signed_text().as_bytes());
        m
    }

    /// What the signature covers: the message's fields, and that it is a drain
    /// message (a dispatch signature can never pass for one). A tick's message
    /// of a fixed `DRAINERS` keeps the text it always had.
    fn signed_text(&self) -> String {
        let (tick, drainer) = (self.tick_started_at, self.drainer);
        if self.chain == 0 && self.slot == 0 && self.holder.is_empty() {
            return format!("drain:{tick}:{drainer}");
        }
        format!(
            "drain:{tick}:{drainer}:{}:{}:{}",
            self.chain, self.slot, self.holder
        )
    }

    /// Whether one of `secrets` (the current and, during a rotation, the previous
    /// `DISPATCH_SECRET`) signed it within [`MAX_AGE_SECS`] of `now_secs`.
    pub fn verify<'s>(
        &self,
        secrets: impl IntoIterator<Item = &'s str>,
        now_secs: i64,
    ) -> Result<(), SignatureError> {
        let header = SignatureHeader::parse(Some(&self.signature))?;
        header.check_fresh(now_secs, MAX_AGE_SECS)?;
        header.check_tag(secrets, self.signed_text().as_bytes())
    }
}

/// Why `DRAINERS` > 1 (or `auto`) cannot run: the message a misconfigured
/// Worker gives; `drainers` is the setting's value.
pub fn missing_queue(drainers: &str, binding_error: &str) -> String {
    format!(
        "DRAINERS ({drainers}) needs a queue bound as DRAIN_QUEUE whose consumer is this Worker (max_batch_size = 1; wrangler.drainers.toml): {binding_error}; set DRAINERS to 1 to drain in the tick"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "dispatch-secret-0123456789";

    #[test]
    fn a_message_signed_with_the_dispatch_secret_verifies() {
        let m = DrainMessage::new(SECRET, 1_000, 1_000_500, 3);
        assert_eq!(m.verify([SECRET], 1_000), Ok(()));
        // During a rotation, either secret.
        assert_eq!(m.verify(["new-secret-0123456789", SECRET], 1_000), Ok(()));
        // It survives the queue's JSON.
        let back: DrainMessage = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(back, m);
    }

    #[test]
    fn another_producers_message_is_refused() {
        let m = DrainMessage::new("another-workers-secret-0123", 1_000, 1_000_500, 1);
        assert_eq!(m.verify([SECRET], 1_000), Err(SignatureError::Mismatch));
        // Fields changed after signing.
        let mut m = DrainMessage::new(SECRET, 1_000, 1_000_500, 1);
        m.drainer = 2;
        assert_eq!(m.verify([SECRET], 1_000), Err(SignatureError::Mismatch));
        let unsigned = DrainMessage {
            signature: String::new(),
            ..m
        };
        assert_eq!(
            unsigned.verify([SECRET], 1_000),
            Err(SignatureError::Malformed)
        );
    }

    #[test]
    fn a_dispatch_signature_is_no_drain_message_signature() {
        // The same secret signs dispatches: their text never reads as a drain's.
        let mut m = DrainMessage::new(SECRET, 1_000, 1_000_500, 1);
        let text = m.signed_text();
        m.signature = signature::sign(SECRET, 1_000, format!("x{text}").as_bytes());
        assert_eq!(m.verify([SECRET], 1_000), Err(SignatureError::Mismatch));
    }

    #[test]
    fn a_continuation_is_signed_with_its_place_and_slot() {
        let first = DrainMessage::new(SECRET, 1_000, 1_000_500, 3);
        let next = Continuation {
            chain: 1,
            slot: 7,
            holder: "h2".into(),
        };
        let c = first.continuation(SECRET, 1_010, next);
        assert_eq!((c.tick_started_at, c.drainer), (1_000_500, 3));
        assert_eq!((c.chain, c.slot, c.holder.as_str()), (1, 7, "h2"));
        assert_eq!(c.verify([SECRET], 1_010), Ok(()));
        let back: DrainMessage = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        // Each of its fields is signed: none can be changed to take another slot.
        for tamper in [
            |m: &mut DrainMessage| m.chain = 2,
            |m: &mut DrainMessage| m.slot = 8,
            |m: &mut DrainMessage| m.holder = "h3".into(),
        ] {
            let mut m = c.clone();
            tamper(&mut m);
            assert_eq!(m.verify([SECRET], 1_010), Err(SignatureError::Mismatch));
        }
        // A tick's message reads as it always did (no new fields on the queue).
        let json = serde_json::to_string(&first).unwrap();
        assert!(!json.contains("chain") && !json.contains("slot"), "{json}");
    }

    fn settings(pairs: &[(&str, &str)]) -> Settings {
        Settings::from_lookup(|n| {
            pairs
                .iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.to_string())
        })
        .unwrap()
    }

    #[test]
    fn a_drainer_s_capacity_is_its_child_cap_or_what_its_budget_pays_for() {
        // The defaults: 31 children fit a budget of 45 with the drainer's own calls.
        assert_eq!(capacity(&settings(&[]), 1), 31);
        assert_eq!(
            capacity(&settings(&[("MAX_CHILD_INVOCATIONS", "20")]), 1),
            20
        );
        // Free's budget bounds a high child cap.
        let free = settings(&[("MAX_CHILD_INVOCATIONS", "1000")]);
        assert_eq!(capacity(&free, 1), 45 - DRAINER_OVERHEAD_SUBREQUESTS);
        // Inline: no child cap; each item costs its own calls.
        let inline = settings(&[("DISPATCH_MODE", "inline"), ("SUBREQUEST_BUDGET", "1000")]);
        assert_eq!(capacity(&inline, 3), (1000 - 9) / 3);
        assert_eq!(capacity(&settings(&[("DISPATCH_MODE", "inline")]), 100), 1);
    }

    #[test]
    fn a_tick_starts_drainers_for_the_due_work_within_the_live_bound() {
        assert_eq!(to_start(0, 0, 31, 50), 0, "none when nothing is due");
        assert_eq!(to_start(1, 0, 31, 50), 1);
        assert_eq!(to_start(31, 0, 31, 50), 1);
        assert_eq!(to_start(32, 0, 31, 50), 2);
        assert_eq!(to_start(1_000, 0, 31, 50), 33, "the seed's headline");
        assert_eq!(to_start(100_000, 0, 31, 50), 50, "at most MAX_DRAINERS");
        assert_eq!(to_start(100_000, 45, 31, 50), 5, "counting the live ones");
        assert_eq!(to_start(100_000, 60, 31, 50), 0);
        assert_eq!(count_cap(31, 50), 1_550);
    }

    #[test]
    fn a_message_older_than_the_max_age_is_refused() {
        let m = DrainMessage::new(SECRET, 1_000, 1_000_500, 1);
        let late = 1_000 + MAX_AGE_SECS as i64;
        assert_eq!(m.verify([SECRET], late), Ok(()));
        assert_eq!(m.verify([SECRET], late + 1), Err(SignatureError::Stale));
    }

    #[test]
    fn the_missing_queue_message_names_both_settings() {
        let m = missing_queue("4", "no binding found for `DRAIN_QUEUE`");
        assert!(
            m.starts_with("DRAINERS (4) needs a queue bound as DRAIN_QUEUE"),
            "{m}"
        );
        assert!(m.contains("no binding found"), "{m}");
    }
}
