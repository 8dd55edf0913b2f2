//! `POST /batches`, `GET /batches`, `GET /batches/{id}`, `GET /batches/{id}/items`,
//! `GET /batches/{id}/timeline`: ad-hoc batches, progress, rate and throughput,
//! and (`GET /batches/{id}`) what the batch waits on and what it cost.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::{keys_view, limit_only, to_json, ApiResult, App};
use crate::core::batch::cost::{BatchCost, Cost};
use crate::core::batch::model::{BatchRow, BatchTally};
use crate::core::batch::progress::BatchProgress;
use crate::core::batch::receipts;
use crate::core::batch::requests::{
    parse_json, parse_page_query, parse_priority, validate_create_batch, CreateBatch,
    CreateBatchBody,
};
use crate::core::batch::rows::ItemRow;
use crate::core::batch::throughput;
use crate::core::error::ApiError;
use crate::core::flow::waiting::{top_keys, ItemWaiting, KeyWaiting, PendingItem, WaitingCounts};
use crate::core::schedule::key::{adhoc_key_prefix, reserved_key};
use crate::core::security::target::TargetPolicy;
use crate::core::time::rfc3339;
use crate::jobs::Jobs;
use crate::store::{BatchOptions, BatchSource, Created, Db};

/// How many ids a create draws before it gives up: ids are 64 random bits, so a
/// second clash in a row means something else is wrong.
const CREATE_TRIES: u32 = 3;

/// Create a batch from active subjects or explicit items: 201 with the new batch,
/// or 200 with the existing batch of that key (nothing added). Keys under a
/// schedule's prefix (`<schedule id>:`, and `daily:` always) are the schedule's.
pub async fn create<D: Db>(app: &App<'_, D>, body: &[u8], policy: &TargetPolicy<'_>) -> ApiResult {
    let mut body: CreateBatchBody = parse_json(body)?;
    let on_finish = body.on_finish.take();
    let priority = body.priority.take();
    let request = validate_create_batch(body, &|kind, payload| {
        app.jobs.check_item(kind, payload, policy)
    })?;
    let priority = parse_priority(priority.as_ref())?;
    let on_finish = on_finish.map(|o| o.validate(policy)).transpose()?;
    let (key, source) = match &request {
        CreateBatch::FromSubjects { key } => (key.clone(), BatchSource::ActiveSubjects),
        CreateBatch::FromItems { key, items } => (key.clone(), BatchSource::Items(items)),
    };
    if let Some(prefix) = key.as_deref().map(adhoc_key_prefix).transpose()?.flatten() {
        if app.store.get_schedule(prefix).await?.is_some() {
            return Err(reserved_key(prefix));
        }
    }
    // A fresh id per try: an id another batch holds fails the create and writes
    // nothing (`sql/create_batch.sql`). The default key is named after the id, so
    // it is drawn again with it.
    let mut tries = 0;
    let created = loop {
        tries += 1;
        let id = (app.new_id)();
        let key = key.clone().unwrap_or_else(|| format!("adhoc:{id}"));
        let created = app
            .store
            .create_batch_with(
                &id,
                &key,
                app.now,
                app.settings.max_attempts,
                source,
                BatchOptions {
                    on_finish: on_finish.as_deref(),
                    priority,
                },
            )
            .await;
        match created {
            Err(e) if e.is_batch_id_taken() && tries < CREATE_TRIES => continue,
            created => break created?,
        }
    };
    let (status, event, row) = match created {
        Created::New(row) => (201, "batch_created", row),
        Created::Existing(row) => (200, "batch_exists", row),
    };
    (app.event)(
        event,
        json!({ "batch_id": row.id, "key": row.key, "total": row.total }),
    );
    Ok((status, to_json(&BatchProgress::from_row(&row))))
}

/// Newest first, `limit` only: batches are few, so they are not paged. Running
/// batches carry their rate and ETA (one more statement, only if any runs).
pub async fn list<D: Db>(app: &App<'_, D>, query: &[(String, String)]) -> ApiResult {
    let limit = limit_only(query, "batches")?;
    let rows = app.store.list_batches(limit).await?;
    let batches = with_estimates(app, &rows).await?;
    Ok((200, json!({ "batches": batches })))
}

pub async fn get<D: Db>(app: &App<'_, D>, id: &str) -> ApiResult {
    let row = find(app, id).await?;
    let mut progress = with_estimates(app, std::slice::from_ref(&row)).await?;
    let (waiting_on, waiting_keys) = waiting_counts(app, &row).await?;
    progress[0].waiting_on = Some(waiting_on);
    progress[0].waiting_keys = Some(waiting_keys);
    progress[0].cost = Cost::stored(row.cost.as_deref()).map(BatchCost::priced);
    Ok((200, to_json(&progress[0])))
}

/// Its pending items per reason they wait, and the keys holding most of them: a
/// paused batch's all wait on it and nothing pending reads nothing (no call
/// either way, no keys); else the batch's head (`core::waiting::HEAD_READ`) and
/// its keys, two statements.
async fn waiting_counts<D: Db>(
    app: &App<'_, D>,
    row: &BatchRow,
) -> Result<(WaitingCounts, Vec<KeyWaiting>), ApiError> {
    let pending = row.pending();
    if row.status == "paused" {
        return Ok((WaitingCounts::batch_paused(pending), Vec::new()));
    }
    if pending == 0 {
        return Ok((WaitingCounts::of(&[], 0), Vec::new()));
    }
    let rows = app
        .store
        .waiting_on_counts(&row.id, app.now, app.settings.claim_chunk)
        .await?;
    Ok((WaitingCounts::of(&rows, pending), top_keys(&rows)))
}

async fn find<D: Db>(app: &App<'_, D>, id: &str) -> Result<BatchRow, ApiError> {
    app.store
        .get_batch(id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("batch {id:?}")))
}

/// Progress of `rows`, the running ones with their rate and ETA from the items
/// they ended in the last invocations (`core::throughput`).
async fn with_estimates<D: Db>(
    app: &App<'_, D>,
    rows: &[BatchRow],
) -> Result<Vec<BatchProgress>, ApiError> {
    let running: Vec<&str> = rows
        .iter()
        .filter(|r| r.status == "running")
        .map(|r| r.id.as_str())
        .collect();
    let recent = if running.is_empty() {
        Default::default()
    } else {
        let since = app.now - throughput::RATE_WINDOW_MS;
        app.store.recent_throughput(since, &running).await?
    };
    Ok(rows
        .iter()
        .map(|row| {
            let ended = recent
                .get(&row.id)
                .map_or(0, |t: &BatchTally| t.completed + t.failed);
            BatchProgress::from_row(row).with_estimate(throughput::estimate(row, ended, app.now))
        })
        .collect())
}

/// Items the batch ended per time bucket (completions per minute by default),
/// from the invocation summaries, never from the items.
pub async fn timeline<D: Db>(app: &App<'_, D>, id: &str, query: &[(String, String)]) -> ApiResult {
    let q = throughput::parse_timeline_query(query)?;
    let row = find(app, id).await?;
    let window = throughput::timeline_window(&row, q, app.now);
    let buckets = app
        .store
        .batch_timeline(id, window, q.bucket_ms, throughput::MAX_POINTS)
        .await?;
    let points: Vec<Value> = buckets
        .iter()
        .map(|b| json!({ "at": rfc3339(b.bucket), "completed": b.completed, "failed": b.failed }))
        .collect();
    Ok((
        200,
        json!({
            "batch_id": row.id,
            "bucket_seconds": q.bucket_ms / 1_000,
            "from": rfc3339(window.first_bucket),
            "to": rfc3339(window.to),
            "points": points,
        }),
    ))
}

/// One page of a batch's items in subject_id order, optionally of one status.
/// `next_after` is set when more may follow: after a full page, or where a page
/// stopped walking the batch (`core::listing`), however few items it holds.
pub async fn items<D: Db>(app: &App<'_, D>, id: &str, query: &[(String, String)]) -> ApiResult {
    let q = parse_page_query(query, true)?;
    if !app.store.batch_exists(id).await? {
        return Err(ApiError::NotFound(format!("batch {id:?}")));
    }
    let page = app
        .store
        .list_batch_items(id, &q.after, q.status, q.limit)
        .await?;
    // One more statement, over the pending items' keys, only when there are any.
    let pending: Vec<PendingItem> = page
        .items
        .iter()
        .filter(|i| i.status == "pending")
        .map(PendingItem::from)
        .collect();
    let waiting: HashMap<i64, ItemWaiting> = app
        .store
        .waiting_on_items(id, &pending, app.now, app.settings.claim_chunk)
        .await?
        .iter()
        .filter_map(|w| Some((w.id, w.shown()?)))
        .collect();
    let items: Vec<Value> = page
        .items
        .iter()
        .map(|i| item_json(app.jobs, i, waiting.get(&i.id)))
        .collect();
    Ok((
        200,
        json!({ "items": items, "next_after": page.next_after }),
    ))
}

/// An item; `waiting_on` null unless it is pending (and was still when read).
fn item_json(jobs: &Jobs, i: &ItemRow, waiting_on: Option<&ItemWaiting>) -> Value {
    json!({
        "id": i.id,
        "subject_id": i.subject_id,
        "kind": i.kind,
        "status": i.status,
        "attempt": i.attempt,
        "max_attempts": i.max_attempts,
        "last_error": i.last_error,
        "run_after": rfc3339(i.run_after),
        "started_at": i.started_at.map(rfc3339),
        "completed_at": i.completed_at.map(rfc3339),
        "receipts": receipts::view(i.receipts.as_deref(), jobs.has_channels(&i.kind)),
        "limits": keys_view(i.limits.as_deref()),
        "waiting_on": waiting_on,
    })
}
