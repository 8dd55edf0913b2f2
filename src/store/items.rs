//! The queue's items: claim, group commit (with the batches' counters), reaper, listings.

use std::collections::HashSet;

use crate::core::flow::limits;

use super::*;

impl<D: Db> Store<D> {
    /// Claim up to `limit` due items under fresh leases (one call), as a claimer
    /// that remembers nothing.
    pub async fn claim_due_items(
        &self,
        now: i64,
        limit: i64,
        token_prefix: &str,
        lease_expires_at: i64,
    ) -> StoreResult<Vec<ClaimedItem>> {
        let claim = self
            .claim_due_items_after(
                now,
                limit,
                token_prefix,
                lease_expires_at,
                &Claimed::default(),
            )
            .await?;
        Ok(claim.items)
    }

    /// [`Store::claim_due_items`] for a claimer that remembers what it claimed
    /// ([`Claimed`]): while no limit is defined, each batch's cursor items are
    /// read from above the largest id it claimed there, not only above the
    /// batch's stored cursor (which the commits move), so its own items in flight
    /// are not read again; and the rate charge (a statement before the claim in
    /// the same `batch()`) is sent only while rate limits are defined, or not
    /// known not to be.
    pub async fn claim_due_items_after(
        &self,
        now: i64,
        limit: i64,
        token_prefix: &str,
        lease_expires_at: i64,
        claimed: &Claimed,
    ) -> StoreResult<Claim> {
        let shape = ClaimShape::of(claimed.in_force, limit);
        if shape.plain {
            let plain = sql::ClaimPlain {
                now,
                limit,
                token_prefix,
                claimed: &claimed.json(),
                per_batch: shape.per_batch,
                charges: 0,
                lease_expires_at,
            };
            let rows: Vec<ClaimRow> = self.db.run(plain).await?;
            if let Some(first) = rows.first() {
                return Ok(Claim {
                    in_force: Some(first.in_force()),
                    items: rows.into_iter().map(ClaimRow::item).collect(),
                    held_until: None,
                });
            }
            // Nothing due, or a limit or pause came into force since the last
            // claim (the plain selection then takes nothing): the full claim,
            // which reads them, tells which and takes what they let through. Its
            // call is paid from what is free (the drain then releases what this
            // empty claim held); with nothing free it is not sent, and the claim
            // is empty and says nothing of the limits.
            let full = ClaimShape::of(None, limit);
            let answer = self
                .claim_full(now, limit, token_prefix, lease_expires_at, full)
                .await;
            return match answer {
                Err(StoreError::OverBudget(_)) => Ok(Claim::default()),
                answer => answer,
            };
        }
        self.claim_full(now, limit, token_prefix, lease_expires_at, shape)
            .await
    }

    /// The full claim: the hold, the charge (while rates are in force, or
    /// `shape.charges`) and the claim in one `batch()`. Marks are not used: a
    /// limit may have held an item below one this claimer claimed.
    async fn claim_full(
        &self,
        now: i64,
        limit: i64,
        token_prefix: &str,
        lease_expires_at: i64,
        shape: ClaimShape,
    ) -> StoreResult<Claim> {
        let (charges, per_batch, claimed) = (i64::from(shape.charges), shape.per_batch, "{}");
        let mut statements = vec![sql::ClaimHeld {
            now,
            limit,
            token_prefix,
            claimed,
            per_batch,
            charges,
        }
        .bind()];
        if shape.charges {
            statements.push(
                sql::ChargeRateLimits {
                    now,
                    limit,
                    token_prefix,
                    claimed,
                    per_batch,
                    charges,
                }
                .bind(),
            );
        }
        let claim = sql::ClaimDueItems {
            now,
            limit,
            token_prefix,
            claimed,
            per_batch,
            charges,
            lease_expires_at,
        };
        // After the charge, the same claim reads the slots of what it takes.
        statements.push(if shape.charges {
            (sql::CLAIM_DUE_ITEMS_AT_SLOTS, claim.params())
        } else {
            claim.bind()
        });
        let mut results = self.db.batch_results(statements).await?;
        let rows: Vec<ClaimRow> = decode(results.pop().unwrap_or_default())?;
        let hold = decode::<HoldRow>(results.swap_remove(0))?.pop();
        let in_force = match &hold {
            Some(h) => Some(LimitsInForce {
                any: h.limits_defined != 0,
                rates: h.rates_defined != 0,
            }),
            None => rows.first().map(ClaimRow::in_force),
        };
        // Held by a rate the claim could not charge: the next claim charges, at once.
        let uncharged = !shape.charges && in_force.is_some_and(|f| f.rates);
        let held_until = hold.filter(|h| h.held > 0).map(|h| match h.wake_at {
            _ if uncharged => now,
            Some(at) => at.max(now),
            None => now + limits::HELD_POLL_MS,
        });
        Ok(Claim {
            items: rows
                .into_iter()
                .filter(|r| r.claimed != 0)
                .map(ClaimRow::item)
                .collect(),
            in_force,
            held_until,
        })
    }

    /// Apply outcomes in one call: the batches' counters (one row per batch), then
    /// the fenced rows; returns the ids that still held their lease. The others
    /// lost it and were left untouched. No outcomes, no call.
    pub async fn commit_outcomes<'t>(
        &self,
        transitions: impl IntoIterator<Item = &'t Transition>,
    ) -> StoreResult<Vec<i64>> {
        self.apply_outcomes(transitions, false).await
    }

    /// Commit outcomes again after an attempt that failed, which may have been
    /// applied all the same (D1 does not say when an answer is lost): apply what is
    /// still fenced (and count it), then read back every row now carrying the
    /// outcome (one call, three statements). Returns the ids applied by either
    /// attempt; the others lost their lease. No outcomes, no call.
    pub async fn recommit_outcomes<'t>(
        &self,
        transitions: impl IntoIterator<Item = &'t Transition>,
    ) -> StoreResult<Vec<i64>> {
        self.apply_outcomes(transitions, true).await
    }

    /// The commit's call: count, apply and, with `read_back`, read back every row
    /// carrying its outcome (what the last statement returns is the answer).
    async fn apply_outcomes<'t>(
        &self,
        transitions: impl IntoIterator<Item = &'t Transition>,
        read_back: bool,
    ) -> StoreResult<Vec<i64>> {
        let transitions: Vec<&Transition> = transitions.into_iter().collect();
        let Some(json) = transitions_json(transitions.iter().copied()) else {
            return Ok(Vec::new());
        };
        let mut statements = vec![sql::CountCommittedOutcomes {
            outcomes_by_batch: outcomes_by_batch_json(&transitions),
        }
        .bind()];
        // Only a commit that carries a receiver's "slow down" writes a pause.
        if let Some(pauses) = pauses_json(&transitions) {
            statements.push(sql::PauseLimitKeys { pauses }.bind());
        }
        // And only one that carries a refusal learns a rate (LEARN_LIMITS).
        if let Some((refusals, now, completed)) =
            refusals_json(&transitions).filter(|_| self.learning)
        {
            statements.push(
                sql::LearnLimitKeys {
                    refusals,
                    now,
                    completed,
                }
                .bind(),
            );
        }
        statements.push(
            sql::CommitOutcomes {
                outcomes: json.clone(),
            }
            .bind(),
        );
        if read_back {
            // What the failed attempt applied is no longer processing: the count
            // would call it lost. Read back what either attempt applied instead.
            statements.push(sql::CommittedOutcomes { outcomes: json }.bind());
            let rows: Vec<Id<i64>> = self.db.batch_rows(statements).await?;
            return Ok(rows.into_iter().map(|r| r.id).collect());
        }
        let counted = self.db.batch_results(statements).await?.remove(0);
        let mut lost = HashSet::new();
        let mut batches = HashSet::new();
        for b in decode::<LostInCommit>(counted)? {
            lost.extend(b.lost()?);
            batches.insert(b.batch_id);
        }
        // A batch that returned no row is gone: nothing of it was applied.
        Ok(transitions
            .iter()
            .filter(|t| batches.contains(&t.batch_id) && !lost.contains(&t.id))
            .map(|t| t.id)
            .collect())
    }

    /// Requeue or fail a page of expired leases; the failures are counted into
    /// their batches in the same call (one row per batch).
    /// Pauses that ended `limits::PAUSE_KEPT_MS` ago are forgotten in the same
    /// call, with the whole state of keys no limit governs
    /// (`sql/delete_ended_states.sql`, `sql/clear_ended_pauses.sql`).
    pub async fn reap_expired_leases(&self, now: i64, limit: i64) -> StoreResult<Vec<ReapedItem>> {
        self.db
            .batch_rows(vec![
                sql::DeleteEndedStates {
                    now,
                    kept: limits::PAUSE_KEPT_MS,
                }
                .bind(),
                sql::ClearEndedPauses {
                    now,
                    kept: limits::PAUSE_KEPT_MS,
                }
                .bind(),
                sql::CountReapedFailures { now, page: limit }.bind(),
                sql::ReapExpiredLeases { now, page: limit }.bind(),
            ])
            .await
    }

    /// A page of a batch's items in subject_id order, optionally of one status,
    /// and where the next page starts. Failed items come from their own partial
    /// index: listing the few failures of a big batch must not read the batch.
    /// Other statuses walk the batch, at most `ITEMS_WALKED_PER_PAGE` rows a page:
    /// a page that stops there may hold fewer than `limit` items (none, even) and
    /// still name a next page (`core::listing::items_page`).
    pub async fn list_batch_items(
        &self,
        batch_id: &str,
        after: &str,
        status: Option<ItemStatus>,
        limit: i64,
    ) -> StoreResult<ItemsPage> {
        if status == Some(ItemStatus::Failed) {
            let items = self
                .db
                .run(sql::ListFailedItems {
                    batch_id,
                    after,
                    page: limit,
                })
                .await?;
            return Ok(ItemsPage::of(items, limit));
        }
        let status = status.map(|s| s.as_str());
        let rows = self
            .db
            .run(sql::ListBatchItems {
                batch_id,
                after,
                status,
                limit,
                walk: ITEMS_WALKED_PER_PAGE,
            })
            .await?;
        Ok(items_page(rows, limit))
    }

    /// One item with its batch's status.
    pub async fn get_item(&self, id: i64) -> StoreResult<Option<ItemRef>> {
        Ok(self.db.run(sql::GetItem { item_id: id }).await?.pop())
    }
}

/// What a claimer remembers between its claims: the largest item id it claimed
/// in each batch (every cursor item below it was claimed too: a claim takes a
/// batch's cursor items in id order, unless a limit held some back), and whether
/// limits were defined at its last claim that returned rows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Claimed {
    marks: BTreeMap<String, i64>,
    in_force: Option<LimitsInForce>,
}

impl Claimed {
    /// A claimer that knows already whether limits are defined (its first claim
    /// then needs no hold statement to find out).
    pub fn knowing(in_force: LimitsInForce) -> Claimed {
        Claimed {
            in_force: Some(in_force),
            ..Claimed::default()
        }
    }

    pub fn note(&mut self, claim: &Claim) {
        for item in &claim.items {
            let last = self.marks.entry(item.batch_id.clone()).or_insert(0);
            *last = (*last).max(item.item_id);
        }
        if claim.in_force.is_some() {
            self.in_force = claim.in_force;
        }
    }

    /// `{"<batch id>": <largest id>, ...}`, the claim's ?4.
    pub fn json(&self) -> String {
        serde_json::to_string(&self.marks).expect("a map of ids serialises")
    }
}

/// Whether limits, and rate limits, were defined when a claim ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitsInForce {
    pub any: bool,
    pub rates: bool,
}

/// A claim's answer: the items, what it said of the limits (`None` when it
/// could not say: no hold statement and no row), and, when limits held items
/// back, when to claim again (a rate's next token; a poll for a concurrency's
/// slot).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Claim {
    pub items: Vec<ClaimedItem>,
    pub in_force: Option<LimitsInForce>,
    pub held_until: Option<i64>,
}

/// How a claim is sent, from what its claimer knows of the limits (from its
/// last claim's hold statement or rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ClaimShape {
    /// Nothing was in force at the last claim: one statement, the plain
    /// selection (claim_plain_selection.sql), which reads no keys or limits and
    /// reads cursor items from above the claimer's marks (no item is held back
    /// while nothing is in force, so none is left below them). Else the full
    /// claim, its hold statement first (what the limits held back, and whether
    /// they are in force).
    plain: bool,
    /// Send the rate charge before the full claim (else rate-limited keys hold
    /// their items).
    charges: bool,
    per_batch: i64,
}

impl ClaimShape {
    fn of(in_force: Option<LimitsInForce>, limit: i64) -> ClaimShape {
        match in_force {
            // Not known yet: the hold statement finds out, and the claim charges
            // nothing (rate-limited keys hold their items: exact, and the hold
            // says to claim again at once, charging).
            None => ClaimShape {
                plain: false,
                charges: false,
                per_batch: limit,
            },
            Some(f) => ClaimShape {
                plain: !f.any,
                charges: f.rates,
                per_batch: limits::candidates_per_batch(limit, f.any),
            },
        }
    }
}

/// The hold statement's one row (claim_held.sql).
#[derive(Deserialize)]
struct HoldRow {
    held: i64,
    wake_at: Option<i64>,
    limits_defined: i64,
    rates_defined: i64,
}

/// A claimed row with the claim's answer about limits (the same on every row).
/// The item's columns are spelled out, not a `#[serde(flatten)]` `ClaimedItem`:
/// a flattened struct is read as a map, which on wasm copies every row through
/// `Object.entries` into a buffer first, a cost per item the fan-out's profile
/// shows (docs/architecture/flow-control.md, "The claim's cost with nothing in
/// force").
#[derive(Deserialize)]
struct ClaimRow {
    item_id: i64,
    lease_token: String,
    batch_id: String,
    subject_id: String,
    attempt: i64,
    max_attempts: i64,
    kind: String,
    payload: String,
    receipts: Option<String>,
    given_back: i64,
    limits: Option<String>,
    start_at: i64,
    refused_since: Option<i64>,
    /// 0 for a cursor item the claim passed and left pending (claim_due_items.sql).
    claimed: i64,
    limits_defined: i64,
    rates_defined: i64,
}

impl ClaimRow {
    fn item(self) -> ClaimedItem {
        ClaimedItem {
            item_id: self.item_id,
            lease_token: self.lease_token,
            batch_id: self.batch_id,
            subject_id: self.subject_id,
            attempt: self.attempt,
            max_attempts: self.max_attempts,
            kind: self.kind,
            payload: self.payload,
            receipts: self.receipts,
            given_back: self.given_back,
            limits: self.limits,
            start_at: self.start_at,
            refused_since: self.refused_since,
        }
    }

    fn in_force(&self) -> LimitsInForce {
        LimitsInForce {
            any: self.limits_defined != 0,
            rates: self.rates_defined != 0,
        }
    }
}

/// The count's parameter: batch id → that batch's outcomes (the same objects as
/// [`transitions_json`]), so the statement reads each batch's rows once without
/// sorting them into groups.
pub fn outcomes_by_batch_json(transitions: &[&Transition]) -> String {
    let mut by_batch: BTreeMap<&str, Vec<&Transition>> = BTreeMap::new();
    for t in transitions {
        by_batch.entry(t.batch_id.as_str()).or_default().push(t);
    }
    serde_json::to_string(&by_batch).expect("a transition serialises")
}

/// A batch row the count returned: the ids of its outcomes the commit's fence
/// refuses (a JSON array), NULL when none.
#[derive(Deserialize)]
struct LostInCommit {
    batch_id: String,
    lost: Option<String>,
}

impl LostInCommit {
    fn lost(&self) -> StoreResult<Vec<i64>> {
        match &self.lost {
            None => Ok(Vec::new()),
            Some(json) => serde_json::from_str(json).map_err(|e| StoreError::Json(e.to_string())),
        }
    }
}

/// The JSON parameter of `pause_limit_keys.sql`: the outcomes whose receiver
/// paused their keys, or `None` when none did (no statement is sent).
pub fn pauses_json(transitions: &[&Transition]) -> Option<String> {
    let pauses: Vec<Value> = transitions
        .iter()
        .filter_map(|t| {
            let until = t.paused_until?;
            let mut pause = serde_json::json!({"id": t.id, "token": t.token, "until": until});
            if let Some(keys) = &t.refused_keys {
                pause["keys"] = serde_json::json!(keys);
            }
            if let Some(word) = &t.error {
                pause["word"] = serde_json::json!(word);
            }
            Some(pause)
        })
        .collect();
    (!pauses.is_empty()).then(|| Value::Array(pauses).to_string())
}

/// The parameters of `learn_limit_keys.sql`: the outcomes their receiver
/// refused, or that spent its announced budget with a quota per window
/// (`core::flow::pace`), as a JSON array (`refused`, the announced `rate`, a
/// refusal's `wait`), the last such instant and the ids the commit completes
/// (a JSON array: what the receivers took), or `None` when there are none (no
/// statement is sent).
pub fn refusals_json(transitions: &[&Transition]) -> Option<(String, i64, String)> {
    let teaches = |t: &&&Transition| {
        t.refused_at.is_some() || (t.paced_at.is_some() && t.announced_per_minute.is_some())
    };
    let last = transitions
        .iter()
        .filter(teaches)
        .filter_map(|t| t.refused_at.or(t.paced_at))
        .max()?;
    let refused: Vec<Value> = transitions
        .iter()
        .filter(teaches)
        .map(|t| {
            let mut entry = serde_json::json!({"id": t.id, "token": t.token});
            if let Some(keys) = &t.refused_keys {
                entry["keys"] = serde_json::json!(keys);
            }
            if let Some(at) = t.refused_at {
                entry["refused"] = serde_json::json!(1);
                if let Some(until) = t.paused_until {
                    entry["wait"] = serde_json::json!((until - at).max(0));
                }
            }
            if let Some(rate) = t.announced_per_minute {
                entry["rate"] = serde_json::json!(rate);
                if let Some(refill) = t.announced_refill {
                    entry["refill"] = serde_json::json!(refill);
                }
            }
            entry
        })
        .collect();
    let completed: Vec<i64> = transitions
        .iter()
        .filter(|t| t.status == ItemStatus::Completed)
        .map(|t| t.id)
        .collect();
    Some((
        Value::Array(refused).to_string(),
        last,
        serde_json::to_string(&completed).expect("ids serialise"),
    ))
}

/// The JSON parameter of `commit_outcomes.sql` (and of the read-back run with it
/// on a retry), or `None` for no transitions: the [`Transition`]s as serde writes
/// them, so the statements read the model's own field names.
pub fn transitions_json<'t>(
    transitions: impl IntoIterator<Item = &'t Transition>,
) -> Option<String> {
    let rows: Vec<&Transition> = transitions.into_iter().collect();
    (!rows.is_empty()).then(|| serde_json::to_string(&rows).expect("a transition serialises"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::batch::model::ItemStatus;

    /// The claim's ?4 keeps each batch's largest claimed id, whatever the order
    /// the items came in, and is the JSON object the claim reads by batch id.
    #[test]
    fn claimed_keeps_the_largest_id_per_batch() {
        let item = |batch: &str, id: i64| ClaimedItem::sample(id, batch);
        let claim = |items: Vec<ClaimedItem>| Claim {
            items,
            ..Claim::default()
        };
        let mut claimed = Claimed::default();
        assert_eq!(claimed.json(), "{}");
        claimed.note(&claim(vec![item("a", 7), item("b", 3), item("a", 5)]));
        claimed.note(&claim(vec![item("a", 6), item("b", 9)]));
        assert_eq!(claimed.json(), r#"{"a":7,"b":9}"#);
    }

    /// Every `o.value ->> '<key>'` the commit's statements read is a field of the
    /// serialised transition: renaming a field of the model cannot silently turn
    /// into a NULL read by the SQL.
    #[test]
    fn the_commit_json_carries_every_key_its_statements_read() {
        let t = Transition {
            id: 7,
            batch_id: "b".into(),
            token: "t.7".into(),
            status: ItemStatus::Completed,
            run_after: Some(1),
            completed_at: Some(2),
            error: Some("e".into()),
            attempt: Some(1),
            receipts: Some("{}".into()),
            paused_until: Some(3),
            refused_at: Some(4),
            refused_keys: Some(vec!["host:a.example".into()]),
            refused_since: Some(5),
            given_back: Some(1),
            paced_at: None,
            announced_per_minute: Some(120),
            announced_refill: Some(10),
        };
        let json: Value = serde_json::from_str(&transitions_json([&t]).unwrap()).unwrap();
        let row = json[0].as_object().unwrap();
        for statement in [sql::COMMIT_OUTCOMES, sql::COMMITTED_OUTCOMES] {
            assert_carries_keys_read(&transitions_json([&t]).unwrap(), statement);
        }
        assert_eq!(row["status"], "completed");
        assert!(
            row.get("batch_id").is_none(),
            "the rows are not grouped by it here"
        );
        assert_eq!(transitions_json(std::iter::empty()), None);
        // The count reads the same keys from each batch's array.
        let other = Transition {
            id: 8,
            batch_id: "a".into(),
            ..t.clone()
        };
        let grouped: Value =
            serde_json::from_str(&outcomes_by_batch_json(&[&t, &other, &t])).unwrap();
        assert_eq!(grouped["b"].as_array().unwrap().len(), 2);
        assert_eq!(grouped["a"][0]["id"], 8);
        assert_carries_keys_read(&grouped["b"].to_string(), sql::COUNT_COMMITTED_OUTCOMES);
        // The pause reads its own rows, of the paused outcomes only.
        let unpaused = Transition {
            id: 9,
            paused_until: None,
            refused_at: None,
            refused_keys: None,
            ..t.clone()
        };
        let pauses = pauses_json(&[&t, &unpaused]).unwrap();
        assert_carries_keys_read(&pauses, sql::PAUSE_LIMIT_KEYS);
        assert_eq!(
            pauses,
            r#"[{"id":7,"keys":["host:a.example"],"token":"t.7","until":3,"word":"e"}]"#
        );
        assert_eq!(pauses_json(&[&unpaused]), None);
        // The learning reads its own rows, of the refused outcomes only.
        let (refusals, at, completed) = refusals_json(&[&t, &unpaused]).unwrap();
        assert_carries_keys_read(&refusals, sql::LEARN_LIMIT_KEYS);
        assert_eq!(
            (refusals.as_str(), at, completed.as_str()),
            (
                r#"[{"id":7,"keys":["host:a.example"],"rate":120,"refill":10,"refused":1,"token":"t.7","wait":0}]"#,
                4,
                "[7,9]"
            )
        );
        // An answer that spent its budget with a rate teaches too, unrefused.
        let paced = Transition {
            id: 10,
            paced_at: Some(6),
            ..unpaused.clone()
        };
        let (refusals, at, _) = refusals_json(&[&paced]).unwrap();
        assert_eq!(
            (refusals.as_str(), at),
            (r#"[{"id":10,"rate":120,"refill":10,"token":"t.7"}]"#, 6)
        );
        let no_rate = Transition {
            announced_per_minute: None,
            ..paced
        };
        assert_eq!(
            refusals_json(&[&no_rate]),
            None,
            "a pause alone learns nothing"
        );
    }
}
