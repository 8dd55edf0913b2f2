//! The schedules part's checks of bad schedule bodies: each refused with its 400
//! code, the reserved id prefix refused, and nothing changed by any of them.

use crate::check;
use crate::driver::checks::{Check, Checks};
use crate::runtime::api::{Api, Schedule};
use anyhow::{bail, ensure, Result};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

/// One bad schedule body: what it is, the id it is saved under, the body, and
/// the error code it gets.
type BadBody = (&'static str, &'static str, Value, &'static str);

/// The bad-body checks' fixture: what they must leave as it is.
struct BadBodies<'a> {
    api: &'a Api,
    /// A batch key under one of the part's schedules' prefixes.
    reserved_key: &'a str,
    before: Vec<Schedule>,
    batches_before: usize,
}

/// Bad schedule bodies get their 400 code and change nothing; `at` is an instant
/// of the part's day, `reserved_key` a batch key under one of its schedules.
pub async fn bad_bodies(
    api: &Api,
    at: &str,
    reserved_key: &str,
    checks: &mut Checks,
) -> Result<()> {
    let cases: [BadBody; 10] = [
        (
            "a cron Cloudflare refuses",
            "bad",
            json!({"cron": "61 * * * *"}),
            "invalid_cron",
        ),
        (
            "a cron that never fires",
            "bad",
            json!({"cron": "0 0 30 2 *"}),
            "invalid_cron",
        ),
        (
            "every_seconds under 60",
            "bad",
            json!({"every_seconds": 59}),
            "invalid_schedule",
        ),
        (
            "cron and at together",
            "bad",
            json!({"cron": "0 9 * * *", "at": at}),
            "invalid_schedule",
        ),
        (
            "each subject's time with a cron that fires hourly",
            "bad",
            json!({"cron": "0 * * * *", "timezone": "subject"}),
            "invalid_schedule",
        ),
        (
            "jitter over an hour",
            "bad",
            json!({"cron": "0 9 * * *", "jitter_seconds": 3601}),
            "invalid_schedule",
        ),
        (
            "an unknown time zone",
            "bad",
            json!({"cron": "0 9 * * *", "timezone": "Mars/Olympus"}),
            "invalid_timezone",
        ),
        (
            "an unknown field",
            "bad",
            json!({"cron": "0 9 * * *", "retries": 3}),
            "invalid_json",
        ),
        (
            "an id with ':'",
            "a:b",
            json!({"every_seconds": 60}),
            "invalid_id",
        ),
        (
            "the reserved id adhoc",
            "adhoc",
            json!({"every_seconds": 60}),
            "reserved_id",
        ),
    ];
    let mut list: Vec<Check<BadBodies>> = cases
        .into_iter()
        .map(|case| {
            let (name, _, _, code) = &case;
            check!(
                format!("bad schedule body ({name}): 400 {code}"),
                bad_body_refused,
                case
            )
        })
        .collect();
    list.extend([
        check!(
            "POST /batches with a key under a schedule's prefix (digest:…): 400 reserved_key",
            schedule_prefix_reserved
        ),
        check!(
            "bad schedule bodies changed nothing: GET /schedules identical, no batch",
            bad_bodies_changed_nothing
        ),
    ]);
    let mut f = BadBodies {
        api,
        reserved_key,
        before: api.all_schedules().await?,
        batches_before: api.batches(100).await?.len(),
    };
    checks.run(&mut f, list).await;
    Ok(())
}

/// A bad body gets 400 and its code.
async fn bad_body_refused(f: &mut BadBodies<'_>, case: BadBody) -> Result<()> {
    let (_, id, body, code) = case;
    let r = f
        .api
        .admin_raw(
            Method::PUT,
            &format!("/schedules/{}", crate::runtime::api::encode(id)),
            Some(body.to_string()),
        )
        .await?;
    r.refused(StatusCode::BAD_REQUEST, code)
        .map_err(anyhow::Error::msg)
}

async fn schedule_prefix_reserved(f: &mut BadBodies<'_>) -> Result<()> {
    let reserved = f
        .api
        .admin_raw(
            Method::POST,
            "/batches",
            Some(json!({"key": f.reserved_key, "source": "subjects"}).to_string()),
        )
        .await?;
    match reserved.error_shape() {
        Some((code, _)) if code == "reserved_key" => Ok(()),
        _ => bail!(
            "{} {}",
            reserved.status,
            crate::runtime::api::clip(&reserved.body)
        ),
    }
}

async fn bad_bodies_changed_nothing(f: &mut BadBodies<'_>) -> Result<()> {
    let after = f.api.all_schedules().await?;
    let batches = f.api.batches(100).await?;
    ensure!(
        after == f.before && batches.len() == f.batches_before,
        "{} schedules (was {}), {} batches",
        after.len(),
        f.before.len(),
        batches.len()
    );
    Ok(())
}
