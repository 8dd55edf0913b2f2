//! The message a tick sends to `DRAIN_QUEUE` for each drainer (`DRAINERS` > 1),
//! signed with `DISPATCH_SECRET` so a consumer drains only for the Worker that
//! shares its secret: a message from another producer on the queue is refused
//! and logged, never drained.

use serde::{Deserialize, Serialize};

use super::signature::{self, SignatureError, SignatureHeader};

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
    /// `t=<unix seconds>,v1=<hex>` over [`DrainMessage::signed_text`].
    pub signature: String,
}

impl DrainMessage {
    /// Drainer `drainer` of the tick started at `tick_started_at`, signed at
    /// `now_secs` (the real clock, like every signature).
    pub fn new(secret: &str, now_secs: i64, tick_started_at: i64, drainer: i64) -> DrainMessage {
        let text = Self::signed_text(tick_started_at, drainer);
        DrainMessage {
            tick_started_at,
            drainer,
            signature: signature::sign(secret, now_secs, text.as_bytes()),
        }
    }

    /// What the signature covers: the message's fields, and that it is a drain
    /// message (a dispatch signature can never pass for one).
    fn signed_text(tick_started_at: i64, drainer: i64) -> String {
        format!("drain:{tick_started_at}:{drainer}")
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
        let text = Self::signed_text(self.tick_started_at, self.drainer);
        header.check_tag(secrets, text.as_bytes())
    }
}

/// Why `DRAINERS` > 1 cannot run: the message a misconfigured Worker gives.
pub fn missing_queue(drainers: i64, binding_error: &str) -> String {
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
        let text = DrainMessage::signed_text(1_000_500, 1);
        let dispatch_like = signature::sign(SECRET, 1_000, format!("x{text}").as_bytes());
        let m = DrainMessage {
            tick_started_at: 1_000_500,
            drainer: 1,
            signature: dispatch_like,
        };
        assert_eq!(m.verify([SECRET], 1_000), Err(SignatureError::Mismatch));
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
        let m = missing_queue(4, "no binding found for `DRAIN_QUEUE`");
        assert!(
            m.starts_with("DRAINERS (4) needs a queue bound as DRAIN_QUEUE"),
            "{m}"
        );
        assert!(m.contains("no binding found"), "{m}");
    }
}
