//! The dashboard's schedules view in the real browser, run by `ui::dashboard`: a
//! cron schedule and a fired one-off listed with their kind, zone, group, jitter,
//! priority and last batch, the next fire time in the viewer's zone, at phone
//! width too.

use crate::check;
use crate::driver::checks::Checks;
use crate::e2e::ui::browser::{fits_width, WAIT};
use crate::e2e::ui::browser::{Browser, BROWSER_TZ, BROWSER_TZ_OFFSET_MINUTES};
use crate::runtime::api::{encode, Api, TICK_CRON};
use anyhow::{ensure, Context, Result};
use serde::Deserialize;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

/// A cron schedule and a fired one-off listed with kind, zone, group, jitter,
/// enabled, next fire time in the viewer's zone (UTC on hover) and last batch.
pub async fn schedules_view(
    b: &Browser,
    api: &Api,
    shots: &Path,
    checks: &mut Checks,
) -> Result<()> {
    const CRON: &str = "ui-digest";
    const ONCE: &str = "ui-once";
    let (_, cron) = api
        .put_schedule(
            CRON,
            &json!({"cron": "0 9 * * *", "timezone": "Europe/Berlin", "group": CRON, "jitter_seconds": 600}),
        )
        .await?;
    // A one-off over a group of one no-op subject, fired by a tick: a last batch
    // to link (a fire that matches no subject creates none).
    let mut subject = crate::driver::plan::noop_subject("ui-once-subject".into());
    subject.group = Some(ONCE.into());
    api.put_subjects(&[subject]).await?;
    let at = cron_fanout::core::time::rfc3339(chrono::Utc::now().timestamp_millis());
    api.put_schedule(
        ONCE,
        &json!({"at": at, "group": ONCE, "priority": ONCE_PRIORITY}),
    )
    .await?;
    api.fire_cron(TICK_CRON).await?;
    let once = api.schedule(ONCE).await?;
    let result = check_schedules(b, api, &cron, &once, shots, checks).await;
    api.delete_schedule(CRON).await?;
    api.delete_schedule(ONCE).await?;
    api.delete_subject("ui-once-subject").await?;
    result
}

/// The one-off's priority, which the batch it fires gets: not the default, so
/// the page shows what the API said.
const ONCE_PRIORITY: i64 = 3;

/// One row of the schedules view, read by column.
#[derive(Debug, Clone, Default, Deserialize)]
struct ScheduleRow {
    id: String,
    kind: String,
    when: String,
    zone: Option<String>,
    group: String,
    jitter: String,
    priority: String,
    enabled: String,
    next: String,
    next_title: Option<String>,
    link: Option<String>,
}

const SCHEDULE_ROWS: &str =
    "return [...document.querySelectorAll('#schedules tbody tr')].map(tr => {\
      const col = (k) => tr.querySelector(`td[data-col=\"${k}\"]`);\
      const next = col('next').querySelector('time');\
      const link = col('last-batch').querySelector('a');\
      const zone = col('when').querySelector('[data-zone]');\
      return {id: col('id').textContent, kind: col('kind').textContent,\
        when: col('when').firstChild.textContent, zone: zone && zone.textContent,\
        group: col('group').textContent, jitter: col('jitter').textContent,\
        priority: col('priority').textContent,\
        enabled: col('enabled').textContent, next: col('next').textContent,\
        next_title: next && next.title, link: link && link.getAttribute('href')};\
    });";

/// Opens the schedules view, reads its rows, and checks the two schedules'.
async fn check_schedules(
    b: &Browser,
    api: &Api,
    cron: &crate::runtime::api::Schedule,
    once: &crate::runtime::api::Schedule,
    shots: &Path,
    checks: &mut Checks,
) -> Result<()> {
    b.client.set_window_size(1280, 900).await?;
    b.client
        .goto(&format!("{}/#/schedules", api.base()))
        .await?;
    let rows = b
        .until("the schedules listed", WAIT, || async {
            let v = b.client.execute(SCHEDULE_ROWS, vec![]).await?;
            let rows: Vec<ScheduleRow> = serde_json::from_value(v)?;
            let ours = rows
                .iter()
                .filter(|r| r.id == cron.id || r.id == once.id)
                .count();
            Ok((ours == 2).then_some(rows))
        })
        .await?;
    let zone = b.text("#schedules-zone").await?.unwrap_or_default();
    b.screenshot(&shots.join("schedules.png")).await?;
    let row = |id: &str| {
        rows.iter()
            .find(|r| r.id == id)
            .cloned()
            .unwrap_or_default()
    };
    let next = cron
        .next_fire_at
        .clone()
        .context("the cron schedule has no next_fire_at")?;
    let mut f = Schedules {
        b,
        shots,
        cron: row(&cron.id),
        once: row(&once.id),
        once_batch: once.last_batch_id.clone(),
        next: next.clone(),
        zone,
        base: api.base().to_string(),
    };
    checks
        .run(
            &mut f,
            vec![
                check!(
                    "browser: the schedules view lists a cron schedule: kind, cron, time zone, group, jitter, enabled",
                    the_schedules_view_lists_a_cron_schedule
                ),
                check!(
                    format!("browser: its next fire time is shown in the viewer's zone ({BROWSER_TZ}; UTC {next}), with the UTC instant as the title"),
                    its_next_fire_time_is_in_the_viewers_zone
                ),
                check!(
                    "browser: a fired one-off is listed as kind `at`, disabled, with no next fire and a link to its last batch",
                    a_fired_one_off_is_listed_disabled_with_its_last_batch
                ),
                check!(
                    "browser: the schedules view fits a phone (390 px, no horizontal scrolling)",
                    the_schedules_view_fits_a_phone
                ),
                check!(
                    format!("browser: a schedule's priority is listed ({ONCE_PRIORITY}, the default 0), and the view of the batch it fired shows the same"),
                    a_schedules_priority_shows_in_the_list_and_on_its_batch
                ),
            ],
        )
        .await;
    Ok(())
}

/// What the schedules view's checks share: its rows of the cron schedule and
/// of the fired one-off, and its note on the viewer's zone.
struct Schedules<'a> {
    b: &'a Browser,
    shots: &'a Path,
    cron: ScheduleRow,
    once: ScheduleRow,
    /// The one-off's last batch, as the API says.
    once_batch: Option<String>,
    /// The cron schedule's next fire time, as the API says.
    next: String,
    zone: String,
    /// The Worker's URL, to open the one-off's batch.
    base: String,
}

/// The cron one: every column.
async fn the_schedules_view_lists_a_cron_schedule(f: &mut Schedules<'_>) -> Result<()> {
    let r = &f.cron;
    let seen = (
        r.kind.as_str(),
        r.when.as_str(),
        r.zone.as_deref(),
        r.group.as_str(),
        r.jitter.as_str(),
        r.enabled.as_str(),
    );
    let want = (
        "cron",
        "0 9 * * *",
        Some("Europe/Berlin"),
        "ui-digest",
        "up to 10 min",
        "yes",
    );
    ensure!(seen == want, "shown {seen:?}, want {want:?}");
    Ok(())
}

async fn its_next_fire_time_is_in_the_viewers_zone(f: &mut Schedules<'_>) -> Result<()> {
    let (r, next, zone) = (&f.cron, &f.next, &f.zone);
    let local = local_hour_minute(next)?;
    let title = format!("{} UTC", next.replace('T', " ").trim_end_matches('Z'));
    ensure!(
        r.next_title.as_deref() == Some(title.as_str())
            && local.iter().any(|t| r.next.contains(t.as_str()))
            && zone.contains(BROWSER_TZ),
        "shown {:?} (title {:?}), want {local:?} and title {title:?}; zone note {zone:?}",
        r.next,
        r.next_title
    );
    println!("#   next fire shown as {:?} (title {title:?})", r.next);
    Ok(())
}

/// The fired one-off: disabled, no next fire, a link to its batch.
async fn a_fired_one_off_is_listed_disabled_with_its_last_batch(
    f: &mut Schedules<'_>,
) -> Result<()> {
    let r = &f.once;
    let link = f
        .once_batch
        .as_ref()
        .map(|id| format!("#/batches/{}", encode(id)));
    ensure!(
        link.is_some()
            && r.link == link
            && (
                r.kind.as_str(),
                r.enabled.as_str(),
                r.next.as_str(),
                r.group.as_str()
            ) == ("at", "no", "—", "ui-once"),
        "shown {r:?}, want link {link:?}"
    );
    Ok(())
}

/// The one-off's priority in the list, the cron one's default; then the view
/// of the batch the one-off fired, whose priority the API copied from it.
async fn a_schedules_priority_shows_in_the_list_and_on_its_batch(
    f: &mut Schedules<'_>,
) -> Result<()> {
    let want = ONCE_PRIORITY.to_string();
    ensure!(
        (f.once.priority.as_str(), f.cron.priority.as_str()) == (want.as_str(), "0"),
        "listed {:?} and {:?}, want {want:?} and \"0\"",
        f.once.priority,
        f.cron.priority
    );
    let batch = f.once_batch.clone().context("the one-off fired no batch")?;
    let b = f.b;
    b.client
        .goto(&format!("{}/#/batches/{}", f.base, encode(&batch)))
        .await?;
    let shown = b
        .until("the batch view's priority", WAIT, || async {
            b.text("#view [data-stat=priority]").await
        })
        .await?;
    b.screenshot(&f.shots.join("batch-priority.png")).await?;
    ensure!(
        shown == want,
        "the batch view shows priority {shown:?}, want {want:?}"
    );
    Ok(())
}

/// Phone width: no sideways scrolling.
async fn the_schedules_view_fits_a_phone(f: &mut Schedules<'_>) -> Result<()> {
    let b = f.b;
    b.client.set_window_size(390, 844).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fits = fits_width(b).await?;
    b.screenshot(&f.shots.join("phone-schedules.png")).await?;
    b.client.set_window_size(1280, 900).await?;
    ensure!(fits, "the page scrolls sideways");
    Ok(())
}

/// `HH:MM` of an RFC 3339 UTC instant in the browser's zone, as a 24-hour and a
/// 12-hour clock would show it (the page follows the browser's locale).
fn local_hour_minute(iso: &str) -> Result<Vec<String>> {
    let at = chrono::DateTime::parse_from_rfc3339(iso).with_context(|| format!("parsing {iso}"))?;
    let local = at + chrono::Duration::minutes(BROWSER_TZ_OFFSET_MINUTES);
    Ok(vec![
        local.format("%H:%M").to_string(),
        local.format("%I:%M").to_string(),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_times_are_shifted_by_the_browser_zone() {
        // Australia/Darwin is UTC+09:30 all year.
        assert_eq!(
            local_hour_minute("2026-11-22T08:00:00.000Z").unwrap(),
            vec!["17:30".to_string(), "05:30".to_string()]
        );
    }
}
