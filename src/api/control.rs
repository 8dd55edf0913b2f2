//! `POST /batches/{id}/pause`, `/resume`, `/cancel`, `POST /batches/{id}/retry` and
//! `POST /items/{id}/retry`: batch control and dead-letter replay. Each handler
//! reads, decides in `core::control`, and writes with a compare-and-set or in
//! bounded pages (`core::control`'s page sizes), so a repeated request is a no-op
//! and a million-item batch never holds D1 for long.

use serde_json::json;

use super::{to_json, ApiResult, App};
use crate::core::batch::control::{
    decide, decide_item_replay, parse_item_id, refused, validate_retry, BatchStatus, Control,
    ItemReplay, Move, RetryBody, CANCEL_PAGE, CANCEL_PAGES_PER_CALL, CONTROL_TRIES,
};
use crate::core::batch::model::{BatchRow, ItemStatus};
use crate::core::batch::progress::BatchProgress;
use crate::core::batch::requests::parse_json;
use crate::core::error::ApiError;
use crate::store::Db;

/// Pause, resume or cancel: 200 with the batch as `GET /batches/{id}` shows it
/// afterwards, also when it already was where the request puts it; 409
/// `invalid_transition` for an impossible move. A cancel also sweeps the batch's
/// pending items to `cancelled`, up to `CANCEL_PAGES_PER_CALL` pages (repeating it
/// sweeps on; ticks sweep a page each).
pub async fn control<D: Db>(app: &App<'_, D>, id: &str, control: Control) -> ApiResult {
    for _ in 0..CONTROL_TRIES {
        let row = batch(app, id).await?;
        let from = status_of(&row)?;
        let moved = match decide(control, from) {
            Move::Refused => return Err(refused(control, id, from)),
            Move::Already => false,
            Move::To(to) => {
                if !app.store.set_batch_status(id, from, to).await? {
                    // Another request or a tick changed it first: decide again.
                    continue;
                }
                true
            }
        };
        let row = match control {
            Control::Cancel => sweep(app, id, row).await?,
            Control::Pause | Control::Resume => batch(app, id).await?,
        };
        if moved {
            (app.event)(
                &format!("batch_{}", past_tense(control)),
                json!({ "batch_id": id, "from": from.as_str(), "pending": row.pending(),
                        "processing": row.processing, "cancelled": row.cancelled }),
            );
        }
        return Ok((200, to_json(&BatchProgress::from_row(&row))));
    }
    Err(ApiError::invalid_transition(format!(
        "batch {id:?} kept changing status while it was being {}d; try again",
        control.as_str()
    )))
}

fn past_tense(control: Control) -> &'static str {
    match control {
        Control::Pause => "paused",
        Control::Resume => "resumed",
        Control::Cancel => "cancelled",
    }
}

/// Moves the pending items of a cancelled batch to `cancelled`, a page per call,
/// until none is left or this request's share of pages is used; returns the batch
/// as it is afterwards.
async fn sweep<D: Db>(app: &App<'_, D>, id: &str, mut row: BatchRow) -> Result<BatchRow, ApiError> {
    let mut pages = 0;
    while row.pending() > 0 && pages < CANCEL_PAGES_PER_CALL {
        row = app
            .store
            .cancel_pending(id, CANCEL_PAGE, app.now)
            .await?
            .ok_or_else(|| not_found(id))?;
        pages += 1;
    }
    if pages == 0 {
        // Nothing to sweep: the row read before the move still has the old status.
        row = batch(app, id).await?;
    }
    Ok(row)
}

/// `POST /batches/{id}/retry`: requeue the batch's failed items (those whose last
/// error contains `error_contains`, at most `limit`) in pages; `{"requeued": n}`.
pub async fn retry_batch<D: Db>(app: &App<'_, D>, id: &str, body: &[u8]) -> ApiResult {
    let replay = validate_retry(parse_json::<RetryBody>(body)?)?;
    let from = status_of(&batch(app, id).await?)?;
    if !from.takes_replays() {
        return Err(ApiError::invalid_transition(format!(
            "cannot replay items into batch {id:?}: it is {}",
            from.as_str()
        )));
    }
    let mut requeued = 0;
    let mut after = String::new();
    loop {
        let page = replay.next_page(requeued);
        if page == 0 {
            break;
        }
        let moved = app
            .store
            .requeue_failed_page(
                id,
                &after,
                replay.error_contains.as_deref(),
                page,
                app.now,
                app.settings.max_attempts,
            )
            .await?;
        requeued += moved.len() as i64;
        match moved.last() {
            Some(last) if moved.len() as i64 == page => after = last.subject_id.clone(),
            _ => break,
        }
    }
    if requeued > 0 {
        (app.event)(
            "items_requeued",
            json!({ "batch_id": id, "requeued": requeued, "from": from.as_str() }),
        );
    }
    Ok((200, json!({ "requeued": requeued })))
}

/// `POST /items/{id}/retry`: requeue one failed item; `{"requeued": 1}`, or
/// `{"requeued": 0}` when it is already pending or in flight.
pub async fn retry_item<D: Db>(app: &App<'_, D>, raw_id: &str) -> ApiResult {
    let id = parse_item_id(raw_id)?;
    let item = app
        .store
        .get_item(id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("item {id}")))?;
    let status = ItemStatus::parse(&item.status)
        .ok_or_else(|| ApiError::Internal(format!("item {id} has status {:?}", item.status)))?;
    let batch_status = BatchStatus::parse(&item.batch_status).ok_or_else(|| {
        ApiError::Internal(format!(
            "batch {:?} has status {:?}",
            item.batch_id, item.batch_status
        ))
    })?;
    let requeued = match decide_item_replay(status, batch_status) {
        ItemReplay::Refused(why) => {
            return Err(ApiError::invalid_transition(format!(
                "cannot retry item {id}: {why}"
            )))
        }
        ItemReplay::Already => false,
        ItemReplay::Requeue => {
            app.store
                .requeue_failed_item(id, app.now, app.settings.max_attempts)
                .await?
        }
    };
    if requeued {
        (app.event)(
            "item_requeued",
            json!({ "batch_id": item.batch_id, "item_id": id }),
        );
    }
    Ok((200, json!({ "requeued": i64::from(requeued) })))
}

async fn batch<D: Db>(app: &App<'_, D>, id: &str) -> Result<BatchRow, ApiError> {
    app.store.get_batch(id).await?.ok_or_else(|| not_found(id))
}

fn not_found(id: &str) -> ApiError {
    ApiError::NotFound(format!("batch {id:?}"))
}

fn status_of(row: &BatchRow) -> Result<BatchStatus, ApiError> {
    BatchStatus::parse(&row.status).ok_or_else(|| {
        ApiError::Internal(format!("batch {:?} has status {:?}", row.id, row.status))
    })
}
