//! Drainer slots and the due work they drain (`DRAINERS = "auto"`; migration
//! 0022): the tick's count, a tick's drainer taking a slot, a drainer's last
//! step handing its slot on (or freeing it).

use super::*;

/// A token no claim's prefix is (claim tokens are short ids): the claim
/// selection reads every rate state as it is.
const NO_CLAIM: &str = "";

impl<D: Db> Store<D> {
    /// Due items a claim would take now (limits applied, nothing charged),
    /// counted up to `cap`, and the drainer slots live at `now` (one statement).
    pub async fn count_drain_work(&self, now: i64, cap: i64) -> StoreResult<DrainWork> {
        let rows: Vec<DrainWork> = self
            .db
            .run(sql::CountDrainWork {
                now,
                cap,
                no_claim: NO_CLAIM,
                no_marks: "{}",
                per_batch: cap,
                charges: 1,
            })
            .await?;
        rows.into_iter()
            .next()
            .ok_or_else(|| StoreError::Json("count_drain_work returned no row".into()))
    }

    /// Take the lowest free drainer slot of `max_drainers` for `holder`, leased
    /// until `expires_at`; `None` when all are held (one statement, one row).
    pub async fn acquire_drainer_slot(
        &self,
        now: i64,
        holder: &str,
        expires_at: i64,
        max_drainers: i64,
    ) -> StoreResult<Option<i64>> {
        #[derive(Deserialize)]
        struct Row {
            slot: i64,
        }
        let rows: Vec<Row> = self
            .db
            .run(sql::AcquireDrainerSlot {
                now,
                holder,
                expires_at,
                max_drainers,
            })
            .await?;
        Ok(rows.first().map(|r| r.slot))
    }

    /// The last step of a drainer holding `slot` as `holder`: if more is due
    /// than the live chains on lower slots take (`capacity` each), hand the
    /// slot to `next_holder` until `expires_at` and answer
    /// [`SlotPassed::Continue`]; if not, free it. [`SlotPassed::Lost`] when the
    /// slot is no longer `holder`'s. One statement, one row.
    pub async fn pass_drainer_slot(
        &self,
        now: i64,
        (slot, holder): (i64, &str),
        next_holder: &str,
        expires_at: i64,
        capacity: i64,
    ) -> StoreResult<SlotPassed> {
        #[derive(Deserialize)]
        struct Row {
            continues: i64,
        }
        let rows: Vec<Row> = self
            .db
            .run(sql::PassDrainerSlot {
                now,
                cap: slot.saturating_mul(capacity),
                no_claim: NO_CLAIM,
                no_marks: "{}",
                per_batch: slot.saturating_mul(capacity),
                charges: 1,
                slot,
                next_holder,
                expires_at,
                holder,
                capacity,
            })
            .await?;
        Ok(match rows.first() {
            None => SlotPassed::Lost,
            Some(r) if r.continues != 0 => SlotPassed::Continue,
            Some(_) => SlotPassed::Freed,
        })
    }
}

/// What the tick reads before starting drainers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct DrainWork {
    /// Items a claim would take now, up to the cap.
    pub due: i64,
    /// Drainer slots held (their chains go on while work is due).
    pub live: i64,
}

/// How a drainer's last step left its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotPassed {
    /// Work is due: the slot is the continuation's.
    Continue,
    /// Nothing is due: the slot is free, the chain ends.
    Freed,
    /// The slot was no longer this drainer's: it sends nothing.
    Lost,
}
