//! The dashboard's limits view in the real browser, run by `ui::dashboard`: a
//! rate and concurrency limit and a partitioned one, each row read column by
//! column (the rule in words, in flight against the concurrency, tokens against
//! the burst, waiting) and compared with what `GET /limits/{key}` answers, so a
//! view that shows nothing, or other numbers, fails; readable at phone width.

use crate::check;
use crate::driver::checks::Checks;
use crate::e2e::ui::browser::{fits_width, Browser, WAIT};
use crate::runtime::api::{encode, Api};
use anyhow::{ensure, Result};
use reqwest::Method;
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

const RATE: &str = "ui-github";
const PARTITION: &str = "ui-tenant:*";

/// One row of the limits view, read by column; `partitions`: the line under a
/// partitioned limit's row.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
struct LimitRow {
    key: String,
    rule: String,
    in_flight: String,
    tokens: String,
    waiting: String,
    partitions: Option<String>,
}

const LIMIT_ROWS: &str =
    "return [...document.querySelectorAll('#limits tbody tr:not(.detail)')].map(tr => {\
      const col = (k) => tr.querySelector(`td[data-col=\"${k}\"]`).textContent;\
      const next = tr.nextElementSibling;\
      const detail = next && next.classList.contains('detail') ? next.textContent : null;\
      return {key: col('key'), rule: col('rule'), in_flight: col('in-flight'),\
        tokens: col('tokens'), waiting: col('waiting'), partitions: detail};\
    });";

/// What the limits view's checks share: the browser and the rows it showed.
struct Limits<'a> {
    b: &'a Browser,
    shots: &'a Path,
    rate: LimitRow,
    partition: LimitRow,
    /// `GET /limits/{key}` of each, read after the page.
    rate_api: Value,
    partition_api: Value,
}

pub async fn limits_view(b: &Browser, api: &Api, shots: &Path, checks: &mut Checks) -> Result<()> {
    for (key, body) in [
        (RATE, json!({"rate": 20, "burst": 5, "concurrency": 3})),
        (PARTITION, json!({"rate": 10, "concurrency": 2})),
    ] {
        let r = api
            .admin_raw(
                Method::PUT,
                &format!("/limits/{}", encode(key)),
                Some(body.to_string()),
            )
            .await?;
        ensure!(r.status.is_success(), "PUT /limits/{key}: {}", r.status);
    }
    let result = check_limits(b, api, shots, checks).await;
    for key in [RATE, PARTITION] {
        api.admin_raw(Method::DELETE, &format!("/limits/{}", encode(key)), None)
            .await?;
    }
    result
}

async fn check_limits(b: &Browser, api: &Api, shots: &Path, checks: &mut Checks) -> Result<()> {
    b.client.set_window_size(1280, 900).await?;
    b.client.goto(&format!("{}/#/limits", api.base())).await?;
    let rows = b
        .until("the limits listed", WAIT, || async {
            let v = b.client.execute(LIMIT_ROWS, vec![]).await?;
            let rows: Vec<LimitRow> = serde_json::from_value(v)?;
            let ours = rows
                .iter()
                .filter(|r| r.key == RATE || r.key == PARTITION)
                .count();
            Ok((ours == 2).then_some(rows))
        })
        .await?;
    b.screenshot(&shots.join("limits.png")).await?;
    let row = |key: &str| {
        rows.iter()
            .find(|r| r.key == key)
            .cloned()
            .unwrap_or_default()
    };
    let read = |key: &'static str| async move {
        let r = api
            .admin_raw(Method::GET, &format!("/limits/{}", encode(key)), None)
            .await?;
        Ok::<Value, anyhow::Error>(r.json().unwrap_or(Value::Null))
    };
    let mut f = Limits {
        b,
        shots,
        rate: row(RATE),
        partition: row(PARTITION),
        rate_api: read(RATE).await?,
        partition_api: read(PARTITION).await?,
    };
    checks
        .run(
            &mut f,
            vec![
                check!(
                    "browser: the limits view lists a limit with its rule in words, in flight against its concurrency, tokens against its burst and waiting, as GET /limits/{key} says",
                    the_limits_view_shows_a_limit_and_its_state
                ),
                check!(
                    "browser: a partitioned limit's tokens are shown per partition, with its partitions under its row",
                    a_partitioned_limit_shows_its_partitions
                ),
                check!(
                    "browser: the limits view fits a phone (390 px, no horizontal scrolling)",
                    the_limits_view_fits_a_phone
                ),
            ],
        )
        .await;
    Ok(())
}

/// "0 / 3" for `in_flight` 0 of `concurrency` 3, from the API's answer.
fn of(v: &Value, part: &str, whole: &str) -> String {
    format!("{} / {}", v[part], v[whole])
}

/// The row the view should show for limit `key` (`rule` in words) as the API
/// answered `v`: in flight against its concurrency and waiting as `v` says,
/// `tokens` and `partitions` as the limit's kind shows them.
fn row_of(key: &str, rule: &str, v: &Value, tokens: String, partitions: Option<&str>) -> LimitRow {
    LimitRow {
        key: key.into(),
        rule: rule.into(),
        in_flight: of(v, "in_flight", "concurrency"),
        tokens,
        waiting: v["waiting"].to_string(),
        partitions: partitions.map(Into::into),
    }
}

async fn the_limits_view_shows_a_limit_and_its_state(f: &mut Limits<'_>) -> Result<()> {
    let v = &f.rate_api;
    let rule = "20 per second (burst 5) · 3 at once";
    let want = row_of(RATE, rule, v, of(v, "tokens", "burst"), None);
    ensure!(v["tokens"] == 5, "the API says {v}");
    ensure!(f.rate == want, "shown {:?}, want {want:?}", f.rate);
    Ok(())
}

async fn a_partitioned_limit_shows_its_partitions(f: &mut Limits<'_>) -> Result<()> {
    let v = &f.partition_api;
    let rule = "10 per second (burst 10) · 2 at once";
    let partitions = Some("partitions: none in use");
    let want = row_of(PARTITION, rule, v, "per partition".into(), partitions);
    ensure!(v["partitions"] == json!([]), "the API says {v}");
    ensure!(
        f.partition == want,
        "shown {:?}, want {want:?}",
        f.partition
    );
    Ok(())
}

async fn the_limits_view_fits_a_phone(f: &mut Limits<'_>) -> Result<()> {
    let b = f.b;
    b.client.set_window_size(390, 844).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fits = fits_width(b).await?;
    b.screenshot(&f.shots.join("phone-limits.png")).await?;
    b.client.set_window_size(1280, 900).await?;
    ensure!(fits, "the page scrolls sideways");
    Ok(())
}
