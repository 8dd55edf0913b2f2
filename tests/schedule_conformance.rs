//! Schedules on real SQLite with the D1 migrations: the schedule SQL files through
//! the same `Store` code the Worker runs, fed by the pure planner
//! (`core::schedule::plan`). Time is an argument; rows are set up through the API
//! types where one exists, by hand (group, zone) where the HTTP side is part 2.

mod common;

use std::cell::Cell;
use std::collections::BTreeMap;

use chrono::DateTime;
use cron_fanout::core::budget::{Budget, FIRE_SUBREQUESTS};
use cron_fanout::core::model::BatchProgress;
use cron_fanout::core::requests::{ItemInput, SubjectInput};
use cron_fanout::core::schedule::body::{validate_schedule, ScheduleBody};
use cron_fanout::core::schedule::jitter::{fire_seed, jitter_ms, subject_seed};
use cron_fanout::core::schedule::plan::{next_fire_at, plan_fire, zones_for, FirePlan, ZoneUse};
use cron_fanout::core::schedule::tick::{Fired, FIRE_PAGE};
use cron_fanout::core::schedule::{ScheduleRow, ScheduleSpec, ScheduleView};
use cron_fanout::core::time::daily_batch_key;
use cron_fanout::sql;
use cron_fanout::store::metered::Metered;
use cron_fanout::store::sqlite::SqliteDb;
use cron_fanout::store::{BatchSource, Created, Db, FillPages, Param, Store};
use futures::executor::block_on;
use serde_json::{json, Value};

use common::*;

const MAX_ATTEMPTS: i64 = 5;

/// Statements of a tick's first call: whether a batch still fills, and the due
/// read (the fills' pages are a call of their own, made only while one fills).
const FIRST_CALL: i64 = 2;

fn ms(s: &str) -> i64 {
    DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis()
}

fn exec(store: &Store<SqliteDb>, sql: &str) {
    store.db().conn().execute_batch(sql).unwrap();
}

/// `n` active subjects `<prefix>000000…`, then group and zone set by hand (the
/// `PUT /subjects` fields arrive with part 2).
fn add_subjects(store: &Store<SqliteDb>, prefix: &str, n: usize, group: &str, zone: &str) {
    let subjects: Vec<SubjectInput> = (0..n)
        .map(|i| subject(&format!("{prefix}{i:06}"), true))
        .collect();
    for chunk in subjects.chunks(1_000) {
        block_on(store.upsert_subjects(chunk, 1)).unwrap();
    }
    exec(
        store,
        &format!(
            "UPDATE subjects SET group_name = '{group}', timezone = '{zone}' WHERE id LIKE '{prefix}%'"
        ),
    );
}

fn spec(body: Value) -> ScheduleSpec {
    let body: ScheduleBody = serde_json::from_value(body).unwrap();
    validate_schedule(body, 0).unwrap()
}

/// Save a schedule the way `PUT /schedules/{id}` will: next_fire_at from the zones
/// of its subjects.
fn put_schedule(store: &Store<SqliteDb>, id: &str, body: Value, now: i64) -> ScheduleRow {
    let spec = spec(body);
    let in_use = block_on(store.zones_in_use(spec.group.as_deref())).unwrap();
    let zones = zones_for(spec.group.as_deref(), &in_use);
    let next = next_fire_at(&spec, now, &zones);
    block_on(store.upsert_schedule(id, &spec, next, now, None))
        .unwrap()
        .expect("the row just written")
}

fn schedule(store: &Store<SqliteDb>, id: &str) -> ScheduleRow {
    block_on(store.get_schedule(id)).unwrap().unwrap()
}

/// One tick's firing, exactly as the Worker's tick makes it (`Store::fire_due`):
/// the due page, the zones in use if needed, the plans, one batch() that also
/// reads the batches back; every fire applies.
fn tick<D: Db>(store: &Store<D>, now: i64) -> Vec<FirePlan> {
    let n = Cell::new(0);
    let ids = || {
        n.set(n.get() + 1);
        format!("b-{now}-{}", n.get())
    };
    let report = block_on(store.fire_due(now, FIRE_PAGE, MAX_ATTEMPTS, &ids, None)).unwrap();
    assert!(
        report.failed.is_empty() && report.left.is_empty(),
        "{report:?}"
    );
    report.plan.plans
}

/// The same store, every call now charged to a fresh budget (the Worker's meter).
fn metered(store: Store<SqliteDb>) -> (Store<Metered<SqliteDb>>, Budget) {
    let budget = Budget::new(1_000);
    (
        Store::new(Metered::new(store.into_db(), budget.clone())),
        budget,
    )
}

/// subject_id → run_after of a batch's items.
fn run_after_by_subject(store: &Store<SqliteDb>, batch_key: &str) -> BTreeMap<String, i64> {
    // As the API lists them: an item due at once is stored with run_after 0 and
    // shown with its batch's fire instant.
    let batch = block_on(store.batch_by_key(batch_key)).unwrap().unwrap();
    let items = block_on(store.list_batch_items(&batch.id, "", None, 100_000))
        .unwrap()
        .items;
    items
        .into_iter()
        .map(|i| (i.subject_id, i.run_after))
        .collect()
}

#[test]
fn the_migration_adds_the_daily_schedule_due_at_noon_utc_of_its_day() {
    let store = setup();
    let daily = schedule(&store, "daily");
    assert_eq!(
        (
            daily.cron.as_deref(),
            daily.timezone.as_str(),
            daily.group_name.as_deref()
        ),
        (Some("0 12 * * *"), "UTC", Some("default"))
    );
    // Revision 2: 0002 created it, the later migration narrowed it to ungrouped subjects.
    assert_eq!(
        (daily.enabled, daily.jitter_seconds, daily.revision),
        (1, 0, 2)
    );
    let next = daily.next_fire_at.unwrap();
    assert_eq!(next.rem_euclid(86_400_000), 12 * 3_600_000, "12:00 UTC");
    assert_eq!(
        next.div_euclid(86_400_000),
        daily.created_at.div_euclid(86_400_000),
        "the day the migration ran"
    );
    assert!(ScheduleSpec::from_row(&daily).is_ok());
}

#[test]
fn the_migration_keeps_existing_subjects_and_daily_batches() {
    // A database at 0001 with data, then 0002 applied on top.
    let only_first = std::env::temp_dir().join(format!("sched-0001-{}", std::process::id()));
    std::fs::create_dir_all(&only_first).unwrap();
    std::fs::copy(
        migrations().join("0001_init.sql"),
        only_first.join("0001_init.sql"),
    )
    .unwrap();
    let store = Store::new(SqliteDb::in_memory(&only_first).unwrap());
    std::fs::remove_dir_all(&only_first).unwrap();
    exec(
        &store,
        "INSERT INTO subjects (id, kind, payload, active, created_at, updated_at)
           VALUES ('a', 'noop', '{}', 1, 0, 0), ('b', 'noop', '{}', 1, 0, 0), ('c', 'noop', '{}', 0, 0, 0);
         INSERT INTO batches (id, key, created_at) VALUES ('d1', 'daily:2026-11-20', 0), ('x1', 'adhoc:x1', 0);",
    );
    exec(&store, include_str!("../migrations/0002_schedules.sql"));

    assert_eq!(
        count(
            &store,
            "SELECT count(*) FROM subjects WHERE group_name = 'default' AND timezone = 'UTC'"
        ),
        3
    );
    assert_eq!(
        count(
            &store,
            "SELECT count(*) FROM subjects WHERE jitter_seed BETWEEN 0 AND 2147483647"
        ),
        3
    );
    assert_eq!(
        count(&store, "SELECT count(DISTINCT jitter_seed) FROM subjects"),
        3,
        "random seeds"
    );
    assert_eq!(
        count(
            &store,
            "SELECT count(*) FROM batches WHERE schedule_id = 'daily'"
        ),
        1
    );
    assert_eq!(
        count(
            &store,
            "SELECT count(*) FROM batches WHERE key = 'adhoc:x1' AND schedule_id IS NULL"
        ),
        1
    );
    assert_eq!(count(&store, "SELECT count(*) FROM schedules"), 1);
}

#[test]
fn new_subjects_get_their_ids_hash_as_seed_and_keep_it() {
    let store = setup();
    block_on(store.upsert_subjects(&[subject("user-1", true)], 1)).unwrap();
    let seed = || {
        count(
            &store,
            "SELECT jitter_seed FROM subjects WHERE id = 'user-1'",
        )
    };
    assert_eq!(seed(), subject_seed("user-1"));
    exec(&store, "UPDATE subjects SET jitter_seed = 7");
    block_on(store.upsert_subjects(&[subject("user-1", false)], 2)).unwrap();
    assert_eq!(seed(), 7, "an update never changes the seed");
}

#[test]
fn schedules_round_trip_and_a_replace_bumps_the_revision() {
    let store = setup();
    let now = ms("2026-11-21T10:00:00Z");
    let body = json!({"cron": "0 9 * * *", "timezone": "Europe/Berlin", "group": "digest",
                      "jitter_seconds": 600});
    let row = put_schedule(&store, "digest", body.clone(), now);
    assert_eq!(ScheduleSpec::from_row(&row).unwrap(), spec(body));
    assert_eq!(
        (row.revision, row.created_at, row.updated_at),
        (1, now, now)
    );
    assert_eq!(row.next_fire_at, Some(ms("2026-11-22T08:00:00Z")));
    assert_eq!(schedule(&store, "digest"), row);

    let later = now + 60_000;
    let replaced = put_schedule(
        &store,
        "digest",
        json!({"every_seconds": 300, "enabled": false}),
        later,
    );
    assert_eq!(
        (replaced.revision, replaced.created_at, replaced.updated_at),
        (2, now, later)
    );
    assert_eq!(
        (
            replaced.cron,
            replaced.every_seconds,
            replaced.group_name,
            replaced.enabled,
            replaced.next_fire_at
        ),
        (None, Some(300), None, 0, None)
    );

    put_schedule(&store, "once", json!({"at": "2026-12-01T00:00:00Z"}), now);
    let ids = |after: &str, limit| -> Vec<String> {
        block_on(store.list_schedules(after, limit))
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect()
    };
    assert_eq!(ids("", 2), ["daily", "digest"]);
    assert_eq!(ids("digest", 10), ["once"]);
    assert!(block_on(store.delete_schedule("once")).unwrap());
    assert!(!block_on(store.delete_schedule("once")).unwrap());
    assert_eq!(ids("", 10), ["daily", "digest"]);
}

#[test]
fn the_schema_refuses_rows_the_api_never_writes() {
    let store = setup();
    let insert = |values: &str| {
        store.db().conn().execute_batch(&format!(
            "INSERT INTO schedules (id, cron, every_seconds, at, enabled, next_fire_at, created_at, updated_at)
             VALUES {values}"
        ))
    };
    assert!(
        insert("('a', NULL, NULL, NULL, 0, NULL, 0, 0)").is_err(),
        "no timing"
    );
    assert!(
        insert("('b', '* * * * *', 60, NULL, 0, NULL, 0, 0)").is_err(),
        "two timings"
    );
    assert!(
        insert("('c', NULL, 59, NULL, 0, NULL, 0, 0)").is_err(),
        "interval too short"
    );
    assert!(
        insert("('d', '* * * * *', NULL, NULL, 1, NULL, 0, 0)").is_err(),
        "enabled, never due"
    );
    assert!(insert("('e', '* * * * *', NULL, NULL, 0, NULL, 0, 0)").is_ok());
}

#[test]
fn due_schedules_read_the_partial_index_and_skip_idle_and_disabled_ones() {
    let store = setup();
    let now = ms("2026-11-21T10:00:00Z");
    exec(&store, "DELETE FROM schedules");
    // 1,000 idle schedules, 10 disabled with a past next_fire_at, 3 due.
    exec(
        &store,
        &format!(
            "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 999)
             INSERT INTO schedules (id, every_seconds, enabled, next_fire_at, created_at, updated_at)
             SELECT printf('idle-%04d', i), 60, 1, {future} + i, 0, 0 FROM n;
             WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 9)
             INSERT INTO schedules (id, every_seconds, enabled, next_fire_at, created_at, updated_at)
             SELECT printf('off-%d', i), 60, 0, 0, 0, 0 FROM n;
             INSERT INTO schedules (id, every_seconds, enabled, next_fire_at, created_at, updated_at)
             VALUES ('due-b', 60, 1, {now} - 5, 0, 0), ('due-a', 60, 1, {now} - 5, 0, 0),
                    ('due-c', 60, 1, {now}, 0, 0);",
            future = now + 1
        ),
    );
    let ids = |limit| -> Vec<String> {
        block_on(store.due_schedules(now, limit))
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect()
    };
    assert_eq!(ids(100), ["due-a", "due-b", "due-c"]);
    assert_eq!(ids(2), ["due-a", "due-b"], "bounded page, oldest first");
    let plan = query_plan(&store, sql::DUE_SCHEDULES, &[now.into(), 100.into()]).join("\n");
    assert!(
        plan.contains("SEARCH schedules USING INDEX schedules_due (<expr><?)"),
        "{plan}"
    );
}

#[test]
fn zones_in_use_skip_from_pair_to_pair_and_ignore_inactive_subjects() {
    let store = setup();
    add_subjects(&store, "b", 300, "digest", "Europe/Berlin");
    add_subjects(&store, "k", 200, "digest", "Pacific/Kiritimati");
    add_subjects(&store, "n", 100, "feeds", "America/New_York");
    add_subjects(&store, "u", 10, "feeds", "UTC");
    block_on(store.upsert_subjects(&[subject("off", false)], 1)).unwrap();
    exec(
        &store,
        "UPDATE subjects SET timezone = 'Asia/Tokyo' WHERE id = 'off'",
    );

    let pairs = |group: Option<&str>| -> Vec<(Option<String>, String)> {
        block_on(store.zones_in_use(group))
            .unwrap()
            .into_iter()
            .map(|z: ZoneUse| (z.group_name, z.timezone))
            .collect()
    };
    let p = |g: &str, z: &str| (Some(g.to_string()), z.to_string());
    let any = |z: &str| (None, z.to_string());
    assert_eq!(
        pairs(None),
        [
            any("America/New_York"),
            any("Europe/Berlin"),
            any("Pacific/Kiritimati"),
            any("UTC"),
        ],
        "every group's zones, each once"
    );
    assert_eq!(
        pairs(Some("feeds")),
        [p("feeds", "America/New_York"), p("feeds", "UTC")]
    );
    assert_eq!(pairs(Some("nobody")), []);
    let page = block_on(store.zones_of(&["feeds", "digest", "nobody"], true)).unwrap();
    assert_eq!(page.len(), 2 + 2 + 4, "two groups' pairs and every zone");
    for (groups, every) in [(json!([]), 1), (json!(["digest"]), 0)] {
        let plan = query_plan(
            &store,
            sql::ZONES_IN_USE,
            &[groups.to_string().into(), Param::Int(every)],
        )
        .join("\n");
        assert!(!plan.contains("SCAN subjects"), "{plan}");
    }
    let plan = query_plan(
        &store,
        sql::ZONES_IN_USE,
        &["[\"digest\"]".into(), Param::Int(1)],
    )
    .join("\n");
    assert!(
        plan.contains("SEARCH subjects USING COVERING INDEX subjects_group_zone (group_name=? AND timezone>?)"),
        "{plan}"
    );
    assert!(
        plan.contains("SEARCH subjects USING COVERING INDEX subjects_zone (timezone>?)"),
        "{plan}"
    );
}

/// VM steps SQLite took for one run of the zones read, and the rows it returned.
fn zones_work(store: &Store<SqliteDb>, groups: &[&str], every: bool) -> (i32, i32, usize) {
    use rusqlite::StatementStatus;
    let conn = store.db().conn();
    let mut stmt = conn.prepare(sql::ZONES_IN_USE).unwrap();
    let groups = serde_json::to_string(groups).unwrap();
    let rows = stmt
        .query_map(rusqlite::params![groups, i64::from(every)], |_| Ok(()))
        .unwrap()
        .count();
    (
        stmt.get_status(StatementStatus::VmStep),
        stmt.get_status(StatementStatus::FullscanStep),
        rows,
    )
}

#[test]
fn zones_are_read_for_the_page_groups_only_whatever_the_number_of_other_groups() {
    let work = |tenants: usize| {
        let store = setup();
        add_subjects(&store, "b", 20, "digest", "Europe/Berlin");
        add_subjects(&store, "k", 20, "digest", "Pacific/Kiritimati");
        // One group per tenant, in two zones between them.
        let subjects: Vec<SubjectInput> = (0..tenants)
            .map(|i| SubjectInput {
                group: format!("tenant-{i:05}"),
                timezone: if i % 2 == 0 { "UTC" } else { "Asia/Tokyo" }.into(),
                ..subject(&format!("t{i:05}"), true)
            })
            .collect();
        for chunk in subjects.chunks(1_000) {
            block_on(store.upsert_subjects(chunk, 1)).unwrap();
        }
        (
            zones_work(&store, &["digest"], false),
            zones_work(&store, &[], true),
        )
    };
    let (one_group, every_group) = work(10);
    assert_eq!(one_group.2, 2, "digest's two zones");
    assert_eq!(every_group.2, 4, "four zones in use");
    assert_eq!((one_group.1, every_group.1), (0, 0), "no full-scan step");
    assert_eq!(
        work(5_000),
        (one_group, every_group),
        "the same work with 5,000 other groups as with 10"
    );
}

#[test]
fn a_fire_takes_the_same_statements_for_10_and_5000_subjects() {
    let statements_for = |n: usize, group: Option<&str>| {
        let store = setup();
        exec(&store, "DELETE FROM schedules");
        add_subjects(&store, "s", n, "default", "UTC");
        add_subjects(&store, "o", 3, "other", "UTC");
        let mut body = json!({"every_seconds": 60});
        if let Some(g) = group {
            body["group"] = json!(g);
        }
        put_schedule(&store, "feeds", body, ms("2026-11-21T09:59:30Z"));
        let (store, budget) = metered(store);
        let before = store.usage();
        let plans = tick(&store, ms("2026-11-21T10:00:00Z"));
        let (calls, after) = (budget.used(), store.usage());
        assert_eq!(plans.len(), 1);
        let feeds = block_on(store.batch_by_key("feeds:2026-11-21T10:00:00.000Z"))
            .unwrap()
            .unwrap();
        let others = if group.is_some() { 0 } else { 3 };
        assert_eq!(feeds.total, n as i64 + others);
        // Minus the first call (the tick's flags and the due read); nothing was
        // filling, and no zones are read for a schedule on UTC.
        (calls - 1, after.statements - before.statements - FIRST_CALL)
    };
    let small = statements_for(10, None);
    assert_eq!(small, statements_for(5_000, None));
    assert_eq!(
        small,
        (1, 6),
        "one batch() of 5 statements (the batch, its page with its mark, the insert \
         for a fill of every group and its cursor, the schedule) and the read-back"
    );
    // A group's fill: its own insert instead, the same count.
    assert_eq!(statements_for(10, Some("default")), small);
    assert_eq!(statements_for(5_000, Some("default")), small);
}

#[test]
fn a_hundred_due_schedules_fire_in_one_call() {
    let store = setup();
    add_subjects(&store, "s", 20, "default", "UTC");
    let now = ms("2026-11-21T10:00:00Z");
    for i in 0..100 {
        put_schedule(
            &store,
            &format!("s{i:03}"),
            json!({"every_seconds": 60}),
            now - 30_000,
        );
    }
    let (store, budget) = metered(store);
    let plans = tick(&store, now);
    assert_eq!(plans.len(), 100);
    assert_eq!(
        budget.used(),
        2,
        "due query, one batch() reading back its batches"
    );
    let store = Store::new(store.into_db().into_inner());
    assert_eq!(
        count(
            &store,
            "SELECT count(*) FROM batches WHERE schedule_id LIKE 's%'"
        ),
        100
    );
    assert_eq!(count(&store, "SELECT count(*) FROM cron_queue"), 2_000);
    assert!(block_on(store.due_schedules(now, 1_000))
        .unwrap()
        .is_empty());
}

#[test]
fn refiring_creates_nothing() {
    let store = setup();
    add_subjects(&store, "s", 50, "default", "UTC");
    let now = ms("2026-11-21T10:00:00Z");
    put_schedule(&store, "feeds", json!({"every_seconds": 60}), now - 30_000);
    let row = schedule(&store, "feeds");
    let plan = plan_fire(&row, now, &[], "first", MAX_ATTEMPTS).unwrap();
    block_on(store.fire_schedules(std::slice::from_ref(&plan))).unwrap();
    let snapshot = || {
        (
            count(&store, "SELECT count(*) FROM batches"),
            count(&store, "SELECT count(*) FROM cron_queue"),
            count(&store, "SELECT total FROM batches WHERE id = 'first'"),
        )
    };
    assert_eq!(snapshot(), (1, 50, 50));

    // The same fire again (a second tick that read the row before the first
    // committed, or a retry), with a fresh batch id: the key exists, nothing is added.
    let again = plan_fire(&row, now + 1_000, &[], "second", MAX_ATTEMPTS).unwrap();
    assert_eq!(
        again.batch.as_ref().unwrap().key,
        plan.batch.as_ref().unwrap().key
    );
    block_on(store.fire_schedules(&[again])).unwrap();
    assert_eq!(snapshot(), (1, 50, 50));
    assert_eq!(
        schedule(&store, "feeds").last_batch_id.as_deref(),
        Some("first")
    );
}

#[test]
fn a_fire_covers_its_group_and_skips_inactive_subjects() {
    let store = setup();
    add_subjects(&store, "d", 30, "digest", "UTC");
    add_subjects(&store, "f", 20, "feeds", "UTC");
    block_on(store.upsert_subjects(&[subject("d-off", false), subject("f-off", false)], 1))
        .unwrap();
    exec(
        &store,
        "UPDATE subjects SET group_name = 'digest' WHERE id = 'd-off'",
    );
    let now = ms("2026-11-21T10:00:00Z");
    put_schedule(
        &store,
        "g",
        json!({"every_seconds": 60, "group": "digest"}),
        now - 30_000,
    );
    put_schedule(&store, "all", json!({"every_seconds": 60}), now - 30_000);
    put_schedule(
        &store,
        "empty",
        json!({"every_seconds": 60, "group": "nobody"}),
        now - 30_000,
    );
    tick(&store, now);
    let subjects = |key: &str| {
        run_after_by_subject(&store, key)
            .into_keys()
            .collect::<Vec<_>>()
    };
    let g = subjects("g:2026-11-21T10:00:00.000Z");
    assert_eq!(g.len(), 30);
    assert!(g.iter().all(|s| s.starts_with('d') && s != "d-off"));
    let all = subjects("all:2026-11-21T10:00:00.000Z");
    assert_eq!(all.len(), 50);
    assert!(!all.contains(&"f-off".to_string()));
    assert_eq!(
        block_on(store.batch_by_key("empty:2026-11-21T10:00:00.000Z")).unwrap(),
        None,
        "a group with no active subject: no batch"
    );
    let plan = [sql::FILL_GROUP_PAGE, sql::FILL_EVERY_GROUP_PAGE]
        .map(|page| query_plan(&store, page, &["b".into(), 10.into()]).join("\n"))
        .join("\n");
    assert!(
        plan.contains("SEARCH s USING INDEX subjects_group_id (group_name=? AND id>?)"),
        "a group's page reads its group from the cursor on: {plan}"
    );
    assert!(
        plan.contains("SEARCH s USING PRIMARY KEY (id>?)"),
        "every group's page walks the subjects from the cursor on: {plan}"
    );
    assert!(
        !plan.contains("SCAN s"),
        "no page scans the subjects: {plan}"
    );
    assert!(
        !plan.contains("TEMP B-TREE"),
        "no page sorts: the subjects are read in id order: {plan}"
    );
}

#[test]
fn each_subject_runs_at_nine_in_its_own_zone() {
    let store = setup();
    add_subjects(&store, "ber", 3, "digest", "Europe/Berlin");
    add_subjects(&store, "nyc", 3, "digest", "America/New_York");
    add_subjects(&store, "kir", 3, "digest", "Pacific/Kiritimati");
    let saved = ms("2026-11-20T12:00:00Z");
    let row = put_schedule(
        &store,
        "digest",
        json!({"cron": "0 9 * * *", "timezone": "subject", "group": "digest"}),
        saved,
    );
    // Due when Kiritimati (UTC+14) reaches 09:00 of the 21st.
    assert_eq!(row.next_fire_at, Some(ms("2026-11-20T19:00:00Z")));
    assert!(tick(&store, ms("2026-11-20T18:59:59Z"))
        .iter()
        .all(|p| p.schedule_id != "digest"));

    // A subject whose zone changed after the zones were read still gets an item,
    // due at the fire instant (the plan's map does not know its zone).
    let due = block_on(store.due_schedules(ms("2026-11-20T19:00:05Z"), 10)).unwrap();
    let digest = due.iter().find(|r| r.id == "digest").unwrap();
    let in_use = block_on(store.zones_in_use(Some("digest"))).unwrap();
    exec(
        &store,
        "UPDATE subjects SET timezone = 'Asia/Tokyo' WHERE id = 'ber000002'",
    );
    let plan = plan_fire(
        digest,
        ms("2026-11-20T19:00:05Z"),
        &in_use,
        "b-digest",
        MAX_ATTEMPTS,
    )
    .unwrap();
    block_on(store.fire_schedules(&[plan])).unwrap();

    let times = run_after_by_subject(&store, "digest:2026-11-21");
    let at = |t: &str| ms(t);
    let expected: BTreeMap<String, i64> = [
        ("ber000000", at("2026-11-21T08:00:00Z")),
        ("ber000001", at("2026-11-21T08:00:00Z")),
        ("ber000002", at("2026-11-20T19:00:00Z")),
        ("kir000000", at("2026-11-20T19:00:00Z")),
        ("kir000001", at("2026-11-20T19:00:00Z")),
        ("kir000002", at("2026-11-20T19:00:00Z")),
        ("nyc000000", at("2026-11-21T14:00:00Z")),
        ("nyc000001", at("2026-11-21T14:00:00Z")),
        ("nyc000002", at("2026-11-21T14:00:00Z")),
    ]
    .into_iter()
    .map(|(s, t)| (s.to_string(), t))
    .collect();
    assert_eq!(times, expected);
    // Items on their subjects' own time are claimed from the due index: each
    // has an entry there, none is a cursor item (migration 0014).
    assert_eq!(due_index_entries(&store), 9);
    assert_eq!(
        texts(&store, "SELECT json_array(total, cursor_end) FROM batches"),
        ["[9,0]"]
    );
    let digest = schedule(&store, "digest");
    assert_eq!(
        digest.next_fire_at,
        Some(ms("2026-11-21T19:00:00Z")),
        "the 22nd in Kiritimati"
    );
}

#[test]
fn a_zone_added_after_the_save_does_not_skip_the_promised_date() {
    let store = setup();
    add_subjects(&store, "lon", 2, "default", "Europe/London");
    let row = put_schedule(
        &store,
        "digest",
        json!({"cron": "0 9 * * *", "timezone": "subject"}),
        ms("2026-11-20T21:00:00Z"),
    );
    assert_eq!(row.next_fire_at, Some(ms("2026-11-21T09:00:00Z")));
    // Auckland's 09:00 on the 21st is 20:00Z on the 20th, before the save.
    add_subjects(&store, "akl", 2, "default", "Pacific/Auckland");
    tick(&store, ms("2026-11-21T09:00:05Z"));

    let times = run_after_by_subject(&store, "digest:2026-11-21");
    let expected: BTreeMap<String, i64> = [
        ("akl000000", ms("2026-11-20T20:00:00Z")),
        ("akl000001", ms("2026-11-20T20:00:00Z")),
        ("lon000000", ms("2026-11-21T09:00:00Z")),
        ("lon000001", ms("2026-11-21T09:00:00Z")),
    ]
    .into_iter()
    .map(|(s, t)| (s.to_string(), t))
    .collect();
    assert_eq!(times, expected, "the 21st fires for both zones");
    assert_eq!(
        schedule(&store, "digest").next_fire_at,
        Some(ms("2026-11-21T20:00:00Z")),
        "the 22nd, in Auckland first"
    );
}

#[test]
fn jitter_in_sql_equals_the_rust_twin_and_stays_in_its_window() {
    let store = setup();
    add_subjects(&store, "user-", 500, "default", "UTC");
    // Seeds that did not come from the hash (rows older than the migration).
    exec(
        &store,
        "UPDATE subjects SET jitter_seed = 2147483647 WHERE id = 'user-000000'",
    );
    exec(
        &store,
        "UPDATE subjects SET jitter_seed = 0 WHERE id = 'user-000001'",
    );
    let now = ms("2026-11-21T10:00:00Z");
    put_schedule(
        &store,
        "j",
        json!({"every_seconds": 3600, "jitter_seconds": 600}),
        now - 60_000,
    );
    tick(&store, now);
    let key = "j:2026-11-21T10:00:00.000Z";
    let seeds: BTreeMap<String, i64> = {
        let conn = store.db().conn();
        let mut stmt = conn
            .prepare("SELECT id, jitter_seed FROM subjects")
            .unwrap();
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
        rows.map(Result::unwrap).collect()
    };
    let times = run_after_by_subject(&store, key);
    assert_eq!(times.len(), 500);
    let mut distinct = std::collections::HashSet::new();
    for (subject_id, run_after) in &times {
        let offset = run_after - now;
        assert_eq!(
            offset,
            jitter_ms(seeds[subject_id], fire_seed(key), 600),
            "{subject_id}"
        );
        assert!((0..=600_000).contains(&offset));
        distinct.insert(offset);
    }
    assert!(distinct.len() > 250, "{} distinct offsets", distinct.len());
    assert_eq!(seeds["user-000002"], subject_seed("user-000002"));
}

#[test]
fn a_fire_advances_the_schedule_and_a_one_off_disables_itself() {
    let store = setup();
    exec(&store, "DELETE FROM schedules"); // `daily` is due by the real clock
    add_subjects(&store, "s", 5, "default", "UTC");
    let now = ms("2026-11-21T10:00:00Z");
    put_schedule(&store, "feeds", json!({"every_seconds": 60}), now - 30_000);
    put_schedule(
        &store,
        "once",
        json!({"at": "2026-11-21T09:30:00Z"}),
        now - 30_000,
    );
    tick(&store, now + 250);

    let feeds = schedule(&store, "feeds");
    let batch = block_on(store.batch_by_key("feeds:2026-11-21T10:00:00.000Z"))
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            feeds.next_fire_at,
            feeds.last_fired_at,
            feeds.last_batch_id.as_deref(),
            feeds.enabled
        ),
        (
            Some(ms("2026-11-21T10:01:00Z")),
            Some(now + 250),
            Some(batch.id.as_str()),
            1
        )
    );
    let once = schedule(&store, "once");
    assert_eq!((once.enabled, once.next_fire_at), (0, None));
    assert!(once.last_batch_id.is_some());
    assert_eq!(
        count(
            &store,
            "SELECT count(*) FROM batches WHERE schedule_id IN ('feeds', 'once')"
        ),
        2
    );
    // A one-off's late items run at once (run_after = its instant, in the past).
    let late = run_after_by_subject(&store, "once:2026-11-21T09:30:00.000Z");
    assert!(late.values().all(|t| *t == ms("2026-11-21T09:30:00Z")));
    // Nothing is due any more until 10:01.
    assert!(tick(&store, now + 30_000).is_empty());
}

#[test]
fn a_fire_planned_before_a_replace_or_a_delete_applies_nothing() {
    let store = setup();
    add_subjects(&store, "s", 5, "default", "UTC");
    let now = ms("2026-11-21T10:00:00Z");
    put_schedule(&store, "feeds", json!({"every_seconds": 60}), now - 30_000);
    put_schedule(&store, "gone", json!({"every_seconds": 60}), now - 30_000);
    let plans: Vec<FirePlan> = block_on(store.due_schedules(now, 10))
        .unwrap()
        .iter()
        .filter(|r| r.id != "daily")
        .map(|r| plan_fire(r, now, &[], &format!("b-{}", r.id), MAX_ATTEMPTS).unwrap())
        .collect();
    // Meanwhile: feeds is replaced (every 5 minutes), gone is deleted.
    let replaced = put_schedule(&store, "feeds", json!({"every_seconds": 300}), now + 10);
    block_on(store.delete_schedule("gone")).unwrap();
    block_on(store.fire_schedules(&plans)).unwrap();
    assert_eq!(count(&store, "SELECT count(*) FROM batches"), 0);
    assert_eq!(
        schedule(&store, "feeds"),
        replaced,
        "the replace's next_fire_at stands"
    );
}

#[test]
fn a_fire_planned_before_a_delete_and_recreate_applies_nothing() {
    let store = setup();
    add_subjects(&store, "s", 5, "default", "UTC");
    let now = ms("2026-11-21T10:00:00Z");
    // A one-off, due now: its plan would create its batch and disable the row.
    let at = json!({"at": "2026-11-21T10:00:00Z"});
    put_schedule(&store, "job", at, now - 30_000);
    let plans: Vec<FirePlan> = block_on(store.due_schedules(now, 10))
        .unwrap()
        .iter()
        .filter(|r| r.id == "job")
        .map(|r| plan_fire(r, now, &[], "b-old", MAX_ATTEMPTS).unwrap())
        .collect();
    assert_eq!(plans.len(), 1);
    // Meanwhile `job` is deleted and created again (revision 1 again), every 60 s.
    block_on(store.delete_schedule("job")).unwrap();
    let recreated = put_schedule(&store, "job", json!({"every_seconds": 60}), now + 10);
    assert_eq!(recreated.revision, plans[0].revision, "revisions restart");
    block_on(store.fire_schedules(&plans)).unwrap();
    assert_eq!(count(&store, "SELECT count(*) FROM batches"), 0);
    assert_eq!(
        schedule(&store, "job"),
        recreated,
        "the new schedule stays enabled, its next_fire_at stands"
    );
}

#[test]
fn a_failed_fire_writes_nothing_and_stays_due() {
    let store = setup();
    exec(&store, "DELETE FROM schedules");
    add_subjects(&store, "s", 5, "default", "UTC");
    let now = ms("2026-11-21T10:00:00Z");
    let before = put_schedule(&store, "feeds", json!({"every_seconds": 60}), now - 30_000);
    exec(
        &store,
        "CREATE TEMP TRIGGER fail_items BEFORE INSERT ON cron_queue BEGIN SELECT RAISE(ABORT, 'disk full'); END;",
    );
    let due = block_on(store.due_schedules(now, 10)).unwrap();
    let plans: Vec<FirePlan> = due
        .iter()
        .map(|r| plan_fire(r, now, &[], &format!("b-{}", r.id), MAX_ATTEMPTS).unwrap())
        .collect();
    assert!(block_on(store.fire_schedules(&plans)).is_err());
    assert_eq!(count(&store, "SELECT count(*) FROM batches"), 0);
    assert_eq!(schedule(&store, "feeds"), before, "not advanced");

    // The next tick: a failed or missed init is recovered.
    exec(&store, "DROP TRIGGER fail_items");
    tick(&store, now + 60_500);
    assert!(
        block_on(store.batch_by_key("feeds:2026-11-21T10:01:00.000Z"))
            .unwrap()
            .is_some()
    );
    assert_eq!(count(&store, "SELECT count(*) FROM cron_queue"), 5);
}

#[test]
fn the_daily_schedule_creates_the_same_batch_as_the_old_daily_cron() {
    let store = setup();
    add_subjects(&store, "s", 40, "default", "UTC");
    block_on(store.upsert_subjects(&[subject("off", false)], 1)).unwrap();
    let daily = schedule(&store, "daily");
    let noon = daily.next_fire_at.unwrap();
    let now = noon + 30_000;
    let plans = tick(&store, now);
    assert_eq!(plans.len(), 1);
    let key = daily_batch_key(now);
    let batch = block_on(store.batch_by_key(&key))
        .unwrap()
        .expect("daily:<UTC date>");
    assert_eq!(batch.total, 40);
    // A fixed zone without jitter: every item due at once, a cursor item in no
    // index (migration 0014), its cursor range the batch's 40 ids.
    assert_eq!(due_index_entries(&store), 0);
    assert_eq!(
        count(&store, "SELECT cursor_end - claim_after FROM batches"),
        40
    );

    // The old path (DAILY_CRON) on the same day finds that batch and adds nothing,
    // so the trigger and the schedule never make two batches for one day.
    let old =
        block_on(store.create_batch("old", &key, now, MAX_ATTEMPTS, BatchSource::ActiveSubjects))
            .unwrap();
    assert!(matches!(old, Created::Existing(ref row) if row.id == batch.id));

    // Same items as the old path would have made on a fresh database.
    let fresh = setup();
    add_subjects(&fresh, "s", 40, "default", "UTC");
    block_on(fresh.upsert_subjects(&[subject("off", false)], 1)).unwrap();
    block_on(fresh.create_batch("old", &key, now, MAX_ATTEMPTS, BatchSource::ActiveSubjects))
        .unwrap();
    let items = |s: &Store<SqliteDb>| -> Vec<(String, String, String, i64, String)> {
        let conn = s.db().conn();
        let mut stmt = conn
            .prepare("SELECT subject_id, kind, payload, max_attempts, status FROM cron_queue ORDER BY subject_id")
            .unwrap();
        let rows = stmt
            .query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .unwrap();
        rows.map(Result::unwrap).collect()
    };
    assert_eq!(items(&store), items(&fresh));
    assert!(run_after_by_subject(&store, &key)
        .values()
        .all(|t| *t == noon && *t <= now));
    assert_eq!(
        schedule(&store, "daily").next_fire_at,
        Some(noon + 86_400_000)
    );
}

/// The default `daily` schedule reaches only subjects without a group: a subject a
/// group's schedule claims gets that schedule's deliveries and no noon-UTC one on top.
#[test]
fn the_daily_schedule_reaches_only_subjects_without_a_group() {
    let store = setup();
    add_subjects(&store, "u", 3, "default", "UTC");
    add_subjects(&store, "g", 2, "digest", "Europe/Berlin");
    let noon = schedule(&store, "daily").next_fire_at.unwrap();
    let now = noon + 30_000;
    assert_eq!(tick(&store, now).len(), 1);
    let key = daily_batch_key(now);
    let batch = block_on(store.batch_by_key(&key)).unwrap().unwrap();
    assert_eq!(batch.total, 3);
    assert_eq!(
        run_after_by_subject(&store, &key)
            .into_keys()
            .collect::<Vec<_>>(),
        ["u000000", "u000001", "u000002"]
    );
}

/// The narrowing migration on a database of every migration before it: the `daily`
/// row 0002 created moves to group `default` (revision 2), an operator's replaced
/// `daily` is left as it is, and nothing else changes.
#[test]
fn the_daily_migration_narrows_only_the_untouched_daily_schedule() {
    let before = |replaced: bool| {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        apply_migrations(&conn, .."0010".to_string());
        conn.execute_batch(
            "INSERT INTO subjects (id, kind, payload, active, created_at, updated_at)
               VALUES ('a', 'noop', '{}', 1, 0, 0);
             INSERT INTO schedules (id, every_seconds, next_fire_at, created_at, updated_at)
               VALUES ('feeds', 60, 0, 0, 0);",
        )
        .unwrap();
        if replaced {
            conn.execute_batch(
                "UPDATE schedules SET revision = 2, updated_at = 5 WHERE id = 'daily'",
            )
            .unwrap();
        }
        conn
    };
    let rows = |conn: &rusqlite::Connection| -> Vec<String> {
        let mut stmt = conn
            .prepare(
                "SELECT id || '|' || coalesce(group_name, 'NULL') || '|' || revision || '|' ||
                        coalesce(cron, every_seconds) || '|' || enabled || '|' || next_fire_at
                 FROM schedules ORDER BY id",
            )
            .unwrap();
        stmt.query_map([], |r| r.get::<_, String>(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let migration = std::fs::read_to_string(migrations().join("0010_daily_ungrouped.sql")).unwrap();

    let conn = before(false);
    let old = rows(&conn);
    conn.execute_batch(&migration).unwrap();
    let new = rows(&conn);
    assert_eq!(new[1], old[1], "feeds unchanged");
    assert_eq!(
        new[0],
        old[0].replace("daily|NULL|1|", "daily|default|2|"),
        "only group and revision change"
    );

    let conn = before(true);
    let old = rows(&conn);
    conn.execute_batch(&migration).unwrap();
    assert_eq!(rows(&conn), old, "an operator's daily is theirs");
}

#[test]
fn new_schedule_ids_must_not_match_the_prefix_of_adhoc_batches() {
    let store = setup();
    block_on(store.create_batch(
        "x",
        "report:2026-12",
        0,
        MAX_ATTEMPTS,
        BatchSource::ActiveSubjects,
    ))
    .unwrap();
    block_on(store.create_batch("y", "reports", 0, MAX_ATTEMPTS, BatchSource::ActiveSubjects))
        .unwrap();
    assert!(block_on(store.key_prefix_used_by_others("report")).unwrap());
    assert!(
        !block_on(store.key_prefix_used_by_others("reports")).unwrap(),
        "no ':'"
    );
    assert!(!block_on(store.key_prefix_used_by_others("repo")).unwrap());

    // A schedule's own batches do not count against its id.
    put_schedule(
        &store,
        "feeds",
        json!({"every_seconds": 60}),
        ms("2026-11-21T09:59:30Z"),
    );
    tick(&store, ms("2026-11-21T10:00:00Z"));
    assert!(!block_on(store.key_prefix_used_by_others("feeds")).unwrap());
}

/// VM steps and full-scan steps SQLite took for one run of the tick's due query:
/// the work it does, whatever the rows it returns.
fn due_query_work(store: &Store<SqliteDb>, now: i64) -> (i32, i32, usize) {
    use rusqlite::StatementStatus;
    let conn = store.db().conn();
    let mut stmt = conn.prepare(sql::DUE_SCHEDULES).unwrap();
    let rows = stmt
        .query_map(rusqlite::params![now, FIRE_PAGE], |_| Ok(()))
        .unwrap()
        .count();
    (
        stmt.get_status(StatementStatus::VmStep),
        stmt.get_status(StatementStatus::FullscanStep),
        rows,
    )
}

#[test]
fn an_idle_tick_costs_one_query_that_reads_nothing_whatever_the_idle_schedules() {
    let now = ms("2026-11-21T10:00:00Z");
    let idle_tick = |idle: i64| {
        let store = setup();
        exec(&store, "DELETE FROM schedules");
        exec(
            &store,
            &format!(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {idle})
                 INSERT INTO schedules (id, cron, timezone, enabled, next_fire_at, created_at, updated_at)
                 SELECT printf('idle-%05d', i), '0 9 * * *', 'subject', 1, {now} + i, 0, 0 FROM n
                 WHERE {idle} > 0;
                 WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {idle})
                 INSERT INTO schedules (id, every_seconds, enabled, next_fire_at, created_at, updated_at)
                 SELECT printf('off-%05d', i), 60, 0, NULL, 0, 0 FROM n WHERE {idle} > 0;"
            ),
        );
        assert_eq!(count(&store, "SELECT count(*) FROM schedules"), 2 * idle);
        let work = due_query_work(&store, now);
        let (store, budget) = metered(store);
        let plans = tick(&store, now);
        assert!(plans.is_empty());
        (work, budget.used(), store.usage().statements)
    };
    let (work, calls, statements) = idle_tick(0);
    assert_eq!((calls, statements, work.1, work.2), (1, FIRST_CALL, 0, 0));
    // SQLite's own count of the work: one idle schedule or 10,000 (and as many
    // disabled ones) take the same VM steps, none of them a full-scan step. (An
    // empty index is a few steps cheaper still: the seek finds no entry at all.)
    let one = idle_tick(1);
    assert_eq!(one.0 .1, 0);
    assert_eq!(
        idle_tick(10_000),
        one,
        "the same work with 20,000 schedules as with 2"
    );
    assert_eq!(idle_tick(100), one);
}

#[test]
fn zones_are_read_once_and_only_when_a_schedule_on_subject_time_is_due() {
    let store = setup();
    exec(&store, "DELETE FROM schedules");
    add_subjects(&store, "b", 2, "digest", "Europe/Berlin");
    add_subjects(&store, "k", 2, "digest", "Pacific/Kiritimati");
    let saved = ms("2026-11-20T12:00:00Z");
    put_schedule(&store, "utc", json!({"every_seconds": 3600}), saved);
    let (store, budget) = metered(store);
    tick(&store, ms("2026-11-20T13:00:00Z"));
    assert_eq!(
        budget.used(),
        2,
        "due, batch() with its read-back: no zones"
    );
    let store = Store::new(store.into_db().into_inner());
    for id in ["d1", "d2"] {
        put_schedule(
            &store,
            id,
            json!({"cron": "0 9 * * *", "timezone": "subject", "group": "digest"}),
            saved,
        );
    }
    let (store, budget) = metered(store);
    let plans = tick(&store, ms("2026-11-20T19:00:05Z"));
    assert_eq!(plans.len(), 3, "d1, d2 and utc");
    assert_eq!(
        budget.used(),
        3,
        "due, zones once for both, batch() with its read-back"
    );
}

#[test]
fn the_tick_reports_what_became_of_each_fire() {
    let store = setup();
    exec(&store, "DELETE FROM schedules");
    add_subjects(&store, "s", 3, "default", "UTC");
    let now = ms("2026-11-21T10:00:00Z");
    for id in ["a", "b"] {
        put_schedule(&store, id, json!({"every_seconds": 60}), now - 30_000);
    }
    // Another tick fired `b` for 10:00 already (its key exists).
    block_on(store.create_batch(
        "other-tick",
        "b:2026-11-21T10:00:00.000Z",
        now,
        MAX_ATTEMPTS,
        BatchSource::ActiveSubjects,
    ))
    .unwrap();
    let ids = || "mine".to_string();
    let report = block_on(store.fire_due(now + 100, FIRE_PAGE, MAX_ATTEMPTS, &ids, None)).unwrap();
    assert_eq!(
        report.fired,
        [
            Fired::Created {
                schedule_id: "a".into(),
                batch_id: "mine".into(),
                key: "a:2026-11-21T10:00:00.000Z".into(),
                total: 3
            },
            Fired::Existing {
                schedule_id: "b".into(),
                batch_id: "other-tick".into(),
                key: "b:2026-11-21T10:00:00.000Z".into()
            },
        ]
    );
    assert_eq!(
        count(&store, "SELECT count(*) FROM cron_queue"),
        6,
        "3 + 3, none added to b"
    );
}

#[test]
fn a_page_of_due_schedules_fires_per_tick_and_the_rest_on_the_next() {
    let store = setup();
    exec(&store, "DELETE FROM schedules");
    add_subjects(&store, "s", 1, "default", "UTC");
    let now = ms("2026-11-21T10:00:00Z");
    for i in 0..(FIRE_PAGE + 5) {
        put_schedule(
            &store,
            &format!("s{i:03}"),
            json!({"every_seconds": 60}),
            now - 30_000,
        );
    }
    assert_eq!(tick(&store, now).len() as i64, FIRE_PAGE);
    assert_eq!(tick(&store, now + 1_000).len(), 5);
    assert!(tick(&store, now + 2_000).is_empty());
    assert_eq!(
        count(&store, "SELECT count(*) FROM batches"),
        FIRE_PAGE + 5,
        "each fired once"
    );
}

#[test]
fn a_missed_daily_init_is_recovered_by_any_later_tick() {
    // The noon tick failed or never ran; whichever tick comes next
    // creates the day's batch, once, then the schedule waits for the next noon.
    for late in [
        "2026-11-21T12:00:59Z",
        "2026-11-21T23:59:00Z",
        "2026-11-22T11:59:00Z",
    ] {
        let store = setup();
        add_subjects(&store, "s", 4, "default", "UTC");
        exec(
            &store,
            &format!(
                "UPDATE schedules SET next_fire_at = {}, updated_at = 0 WHERE id = 'daily'",
                ms("2026-11-21T12:00:00Z")
            ),
        );
        assert!(
            tick(&store, ms("2026-11-21T11:59:59Z")).is_empty(),
            "not before noon"
        );
        tick(&store, ms(late));
        tick(&store, ms(late) + 1_000);
        let batch = block_on(store.batch_by_key("daily:2026-11-21"))
            .unwrap()
            .unwrap_or_else(|| panic!("{late}: no daily:2026-11-21"));
        assert_eq!(batch.total, 4, "{late}");
        assert_eq!(count(&store, "SELECT count(*) FROM batches"), 1, "{late}");
        assert_eq!(
            schedule(&store, "daily").next_fire_at,
            Some(ms("2026-11-22T12:00:00Z")),
            "{late}"
        );
    }
}

/// Make every fire of schedule `id` fail, the way a D1 error or a 30 s stop would:
/// a trigger that refuses its batch key.
fn make_fires_fail(store: &Store<SqliteDb>, id: &str) {
    exec(
        store,
        &format!(
            "CREATE TEMP TRIGGER fail_{id} BEFORE INSERT ON batches WHEN NEW.key LIKE '{id}:%'
             BEGIN SELECT RAISE(ABORT, 'injected failure'); END;"
        ),
    );
}

fn backoff_of(store: &Store<SqliteDb>, id: &str) -> (i64, Option<i64>) {
    store
        .db()
        .conn()
        .query_row(
            "SELECT fire_failures, retry_at FROM schedules WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
}

fn batch_count(store: &Store<SqliteDb>, schedule_id: &str) -> i64 {
    count(
        store,
        &format!("SELECT count(*) FROM batches WHERE schedule_id = '{schedule_id}'"),
    )
}

/// One tick's firing as the Worker makes it, whatever it reports.
fn tick_anyway(store: &Store<SqliteDb>, now: i64) {
    let n = Cell::new(0);
    let ids = || {
        n.set(n.get() + 1);
        format!("b-{now}-{}", n.get())
    };
    let _ = block_on(store.fire_due(now, FIRE_PAGE, MAX_ATTEMPTS, &ids, None));
}

#[test]
fn a_failing_fire_does_not_stop_the_others_and_backs_off_until_it_recovers() {
    let store = setup();
    exec(&store, "DELETE FROM schedules");
    add_subjects(&store, "s", 5, "default", "UTC");
    let now = ms("2026-11-21T10:00:00Z");
    for id in ["a", "b", "c", "d"] {
        put_schedule(&store, id, json!({"every_seconds": 60}), now - 30_000);
    }
    make_fires_fail(&store, "b");

    tick_anyway(&store, now + 500);
    for id in ["a", "c", "d"] {
        assert_eq!(batch_count(&store, id), 1, "{id} fired despite b");
    }
    assert_eq!(batch_count(&store, "b"), 0);
    let t = now + 500;
    assert_eq!(backoff_of(&store, "b"), (1, Some(t + 60_000)));
    assert_eq!(
        schedule(&store, "b").next_fire_at,
        Some(now),
        "its occurrence stands"
    );

    // Due again a minute later: fails again, waits two.
    let t = t + 60_000;
    tick_anyway(&store, t);
    assert_eq!(backoff_of(&store, "b"), (2, Some(t + 120_000)));
    // Backing off: not tried (no failure counted), the others fire.
    tick_anyway(&store, t + 60_000);
    assert_eq!(backoff_of(&store, "b"), (2, Some(t + 120_000)));
    assert_eq!(batch_count(&store, "a"), 3);
    assert_eq!(batch_count(&store, "b"), 0);

    // The cause goes away: the retry fires the latest occurrence and clears it.
    exec(&store, "DROP TRIGGER fail_b");
    tick_anyway(&store, t + 120_000);
    assert_eq!(backoff_of(&store, "b"), (0, None));
    let b = block_on(store.batch_by_key("b:2026-11-21T10:03:00.000Z"))
        .unwrap()
        .expect("the retry fired the latest occurrence");
    assert_eq!(b.total, 5);
    assert_eq!(
        schedule(&store, "b").next_fire_at,
        Some(ms("2026-11-21T10:04:00Z"))
    );
}

/// A fire whose planned batch id another batch holds fails on its own: nothing of
/// it is written (no item joins that batch, its total stays) and its schedule
/// backs off; its next try plans a fresh id and fires.
#[test]
fn a_fire_whose_batch_id_another_batch_holds_fails_and_fires_later_with_a_fresh_id() {
    let store = setup();
    exec(&store, "DELETE FROM schedules");
    add_subjects(&store, "s", 3, "default", "UTC");
    let now = ms("2026-11-21T10:00:00Z");
    put_schedule(&store, "a", json!({"every_seconds": 60}), now - 30_000);
    let items: Vec<ItemInput> = (0..2)
        .map(|i| ItemInput {
            subject_id: format!("o{i}"),
            kind: "noop".into(),
            payload: json!({}),
            limits: None,
            keys: Vec::new(),
        })
        .collect();
    block_on(store.create_batch(
        "taken",
        "other",
        now,
        MAX_ATTEMPTS,
        BatchSource::Items(&items),
    ))
    .unwrap();
    let before = texts(
        &store,
        "SELECT json_array(id, key, total, item_ranges, fill) FROM batches",
    );
    let taken = || "taken".to_string();
    let t = now + 500;
    let report = block_on(store.fire_due(t, FIRE_PAGE, MAX_ATTEMPTS, &taken, None)).unwrap();
    assert!(report.fired.is_empty(), "{report:?}");
    let failed: Vec<&str> = report
        .failed
        .iter()
        .map(|f| f.schedule_id.as_str())
        .collect();
    assert_eq!(failed, ["a"]);
    assert!(report.failed[0].error.is_batch_id_taken());
    assert_eq!(
        texts(
            &store,
            "SELECT json_array(id, key, total, item_ranges, fill) FROM batches"
        ),
        before
    );
    assert_eq!(count(&store, "SELECT count(*) FROM cron_queue"), 2);
    assert_eq!(backoff_of(&store, "a"), (1, Some(t + 60_000)));

    tick_anyway(&store, t + 60_000);
    assert_eq!(backoff_of(&store, "a"), (0, None));
    assert_eq!(batch_count(&store, "a"), 1);
    assert_eq!(count(&store, "SELECT count(*) FROM cron_queue"), 5);
}

#[test]
fn a_backing_off_schedule_shows_its_failures_and_retry_and_a_put_clears_them() {
    let store = setup();
    exec(&store, "DELETE FROM schedules");
    add_subjects(&store, "s", 2, "default", "UTC");
    let now = ms("2026-11-21T10:00:00Z");
    put_schedule(&store, "b", json!({"every_seconds": 60}), now - 30_000);
    make_fires_fail(&store, "b");
    tick_anyway(&store, now);
    let view = serde_json::to_value(ScheduleView::from_row(&schedule(&store, "b"))).unwrap();
    assert_eq!(
        (&view["fire_failures"], &view["retry_at"]),
        (&json!(1), &json!("2026-11-21T10:01:00.000Z"))
    );
    let listed = block_on(store.list_schedules("", 10)).unwrap();
    assert_eq!(listed[0].fire_failures, 1);
    put_schedule(&store, "b", json!({"every_seconds": 120}), now + 1_000);
    assert_eq!(backoff_of(&store, "b"), (0, None), "a PUT is the fix");
}

#[test]
fn a_failing_fire_among_a_hundred_costs_a_bounded_number_of_calls_and_the_page_drains() {
    let store = setup();
    exec(&store, "DELETE FROM schedules");
    add_subjects(&store, "s", 3, "default", "UTC");
    let now = ms("2026-11-21T10:00:00Z");
    for i in 0..100 {
        put_schedule(
            &store,
            &format!("s{i:03}"),
            json!({"every_seconds": 3600}),
            now - 30_000,
        );
    }
    make_fires_fail(&store, "s070");
    let (store, budget) = metered(store);
    let mut ticks = 0;
    let mut calls = Vec::new();
    let store = loop {
        let before = budget.used();
        let n = Cell::new(0);
        let tick_no = ticks;
        let ids = || {
            n.set(n.get() + 1);
            format!("b-{tick_no}-{}", n.get())
        };
        let at = now + ticks * 60_000;
        let report = block_on(store.fire_due(at, FIRE_PAGE, MAX_ATTEMPTS, &ids, None)).unwrap();
        calls.push(budget.used() - before);
        ticks += 1;
        if !report.failed.is_empty() {
            assert_eq!(report.failed[0].schedule_id, "s070");
            // What the tick had no call left for fires on the next, s070 not.
            let before = budget.used();
            let next = block_on(store.fire_due(at, FIRE_PAGE, MAX_ATTEMPTS, &ids, None)).unwrap();
            assert!(next.failed.is_empty() && next.left.is_empty());
            calls.push(budget.used() - before);
            break Store::new(store.into_db().into_inner());
        }
        assert!(ticks < 10, "the page drains");
    };
    assert!(
        calls.iter().all(|&c| c <= FIRE_SUBREQUESTS),
        "{calls:?} within {FIRE_SUBREQUESTS} calls a tick"
    );
    assert!(ticks <= 5, "isolated in {ticks} ticks");
    assert_eq!(count(&store, "SELECT count(*) FROM batches"), 99);
    assert_eq!(backoff_of(&store, "s070").0, 1);
}

/// A fire whose group has no active subject creates no batch (the demo's database,
/// every subject in a group, gets no empty `daily:<date>` beside its own batch), and
/// the schedule still advances to its next occurrence; the fire is reported as
/// empty, not as superseded. Firing the same occurrence again still creates nothing.
#[test]
fn a_fire_that_matches_no_subject_creates_no_batch_and_still_advances() {
    let store = setup();
    add_subjects(&store, "g", 3, "demo", "UTC");
    block_on(store.upsert_subjects(&[subject("off", false)], 1)).unwrap();
    let noon = schedule(&store, "daily").next_fire_at.unwrap();
    let now = noon + 30_000;
    let ids = || "empty-daily".to_string();
    let report = block_on(store.fire_due(now, FIRE_PAGE, MAX_ATTEMPTS, &ids, None)).unwrap();
    assert!(report.failed.is_empty() && report.left.is_empty());
    assert_eq!(
        report.fired,
        [Fired::Empty {
            schedule_id: "daily".into(),
            key: daily_batch_key(now),
        }]
    );
    assert_eq!(count(&store, "SELECT count(*) FROM batches"), 0);
    assert_eq!(count(&store, "SELECT count(*) FROM cron_queue"), 0);
    let daily = schedule(&store, "daily");
    assert_eq!(daily.next_fire_at, Some(noon + 86_400_000), "it advanced");
    assert_eq!(daily.last_batch_id, None);
    // Not due again today: the next tick fires nothing.
    assert!(tick(&store, now + 60_000).is_empty());
    assert_eq!(count(&store, "SELECT count(*) FROM batches"), 0);
    // A subject joins `default`: the next day's fire has a batch again.
    add_subjects(&store, "u", 2, "default", "UTC");
    tick(&store, noon + 86_400_000 + 1_000);
    let next = block_on(store.batch_by_key(&daily_batch_key(noon + 86_400_000)))
        .unwrap()
        .expect("a batch once a subject matches");
    assert_eq!(next.total, 2);
}

/// A store that fills in pages of `page` subjects, `pages` per call.
fn small_pages(
    store: Store<SqliteDb>,
    page: i64,
    pages: i64,
    create_calls: i64,
) -> Store<SqliteDb> {
    store.with_fill(FillPages {
        page,
        pages_per_call: pages,
        create_calls,
        attempts: Default::default(),
    })
}

/// (total, filling, items in the queue) of batch `key`.
fn fill_state(store: &Store<SqliteDb>, key: &str) -> (i64, bool, i64) {
    let b = block_on(store.batch_by_key(key)).unwrap().unwrap();
    let items = count(
        store,
        &format!(
            "SELECT count(*) FROM cron_queue WHERE batch_id = '{}'",
            b.id
        ),
    );
    (b.total, b.filling != 0, items)
}

/// Every item of the batch ended, as far as its counters know: what the finish
/// check reads.
fn end_every_item_so_far(store: &Store<SqliteDb>, key: &str) {
    exec(
        store,
        &format!("UPDATE batches SET completed = total WHERE key = '{key}'"),
    );
}

#[test]
fn a_fire_over_more_subjects_than_a_page_fills_over_ticks_with_an_exact_total_and_never_ends_early()
{
    let store = small_pages(setup(), 10, 2, 1);
    exec(&store, "DELETE FROM schedules");
    add_subjects(&store, "s", 45, "big", "UTC");
    add_subjects(&store, "o", 5, "other", "UTC");
    let now = ms("2026-11-21T10:00:00Z");
    put_schedule(
        &store,
        "big",
        json!({"every_seconds": 3600, "group": "big"}),
        now - 30_000,
    );
    let key = "big:2026-11-21T10:00:00.000Z";
    let ids = || "big-1".to_string();
    let report = block_on(store.fire_due(now, FIRE_PAGE, MAX_ATTEMPTS, &ids, None)).unwrap();
    assert!(matches!(
        &report.fired[..],
        [Fired::Created { total: 10, .. }]
    ));
    // The first page only, and the batch says it is filling.
    assert_eq!(fill_state(&store, key), (10, true, 10));
    let view = BatchProgress::from_row(&block_on(store.batch_by_key(key)).unwrap().unwrap());
    assert!(view.filling);
    // Its items so far all ended: still not finished, it is filling.
    end_every_item_so_far(&store, key);
    assert!(block_on(store.finish_batches(now)).unwrap().is_empty());
    // Each tick continues it by two pages, whatever else it fires.
    tick(&store, now + 60_000);
    assert_eq!(fill_state(&store, key), (30, true, 30));
    end_every_item_so_far(&store, key);
    assert!(block_on(store.finish_batches(now)).unwrap().is_empty());
    tick(&store, now + 120_000);
    assert_eq!(fill_state(&store, key), (45, false, 45), "filled, exact");
    // Exactly the group's subjects, each once.
    let subjects: Vec<String> = run_after_by_subject(&store, key).into_keys().collect();
    assert_eq!(
        subjects,
        (0..45).map(|i| format!("s{i:06}")).collect::<Vec<_>>()
    );
    // Once filled and every item ended, it finishes, once.
    end_every_item_so_far(&store, key);
    assert_eq!(block_on(store.finish_batches(now)).unwrap().len(), 1);
    tick(&store, now + 180_000);
    assert_eq!(
        fill_state(&store, key),
        (45, false, 45),
        "nothing more added"
    );
}

#[test]
fn a_tick_continues_fills_in_a_call_of_their_own_only_while_a_batch_fills() {
    let store = small_pages(setup(), 10, 1, 1);
    exec(&store, "DELETE FROM schedules");
    add_subjects(&store, "s", 45, "default", "UTC");
    let now = ms("2026-11-21T10:00:00Z");
    put_schedule(&store, "all", json!({"every_seconds": 3600}), now - 30_000);
    tick(&store, now);
    assert_eq!(
        fill_state(&store, "all:2026-11-21T10:00:00.000Z"),
        (10, true, 10)
    );
    // With the default pages, the next tick's fill call finishes it.
    let (store, budget) = metered(store);
    let step = |at: i64| {
        let (calls, statements) = (budget.used(), store.usage().statements);
        assert!(tick(&store, at).is_empty());
        (budget.used() - calls, store.usage().statements - statements)
    };
    // Each page is its mark, its two inserts (one inserts nothing) and its cursor.
    let pages = 4 * cron_fanout::core::schedule::fill::FILL_PAGES_PER_CALL;
    assert_eq!(step(now + 60_000), (2, FIRST_CALL + pages));
    let b = block_on(store.batch_by_key("all:2026-11-21T10:00:00.000Z"))
        .unwrap()
        .unwrap();
    assert_eq!((b.total, b.filling), (45, 0));
    // Nothing fills any more: one call, the flag and the due read.
    assert_eq!(step(now + 120_000), (1, FIRST_CALL));
}

#[test]
fn a_tick_that_dies_between_pages_loses_and_doubles_nothing_and_refiring_adds_nothing() {
    let store = small_pages(setup(), 10, 3, 1);
    exec(&store, "DELETE FROM schedules");
    add_subjects(&store, "s", 65, "default", "UTC");
    let now = ms("2026-11-21T10:00:00Z");
    put_schedule(&store, "all", json!({"every_seconds": 3600}), now - 30_000);
    let key = "all:2026-11-21T10:00:00.000Z";
    tick(&store, now);
    assert_eq!(fill_state(&store, key), (10, true, 10));
    // The next tick's fill call dies at its second page (s000025): nothing of
    // that call applies, and the due read is made alone.
    exec(
        &store,
        "CREATE TEMP TRIGGER die BEFORE INSERT ON cron_queue WHEN NEW.subject_id = 's000025'
         BEGIN SELECT RAISE(ABORT, 'the tick died'); END;",
    );
    let ids = || "unused".to_string();
    let report =
        block_on(store.fire_due(now + 60_000, FIRE_PAGE, MAX_ATTEMPTS, &ids, None)).unwrap();
    assert!(report.fill.is_err());
    assert!(report.plan.plans.is_empty(), "the due page was still read");
    assert_eq!(
        fill_state(&store, key),
        (10, true, 10),
        "the dead call wrote nothing"
    );
    exec(&store, "DROP TRIGGER die");
    // The same occurrence fired again with a fresh id, mid-fill: nothing added.
    let row = schedule(&store, "all");
    let again = FirePlan {
        next_fire_at: row.next_fire_at,
        ..plan_fire(
            &ScheduleRow {
                next_fire_at: Some(now),
                ..row.clone()
            },
            now + 1_000,
            &[],
            "again",
            MAX_ATTEMPTS,
        )
        .unwrap()
    };
    assert_eq!(again.batch.as_ref().unwrap().key, key);
    block_on(store.fire_schedules(&[again])).unwrap();
    assert_eq!(count(&store, "SELECT count(*) FROM batches"), 1);
    assert_eq!(fill_state(&store, key), (10, true, 10));
    // Later ticks carry on from the cursor: every subject once, total exact.
    tick(&store, now + 120_000);
    tick(&store, now + 180_000);
    assert_eq!(fill_state(&store, key), (65, false, 65));
    assert_eq!(
        count(&store, "SELECT count(DISTINCT subject_id) FROM cron_queue"),
        65
    );
}

#[test]
fn post_batches_over_subjects_fills_before_it_answers_up_to_its_calls_then_ticks_go_on() {
    let store = small_pages(setup(), 10, 2, 2);
    exec(&store, "DELETE FROM schedules");
    add_subjects(&store, "s", 75, "default", "UTC");
    let now = ms("2026-11-21T10:00:00Z");
    let created = block_on(store.create_batch(
        "adhoc-1",
        "big-adhoc",
        now,
        MAX_ATTEMPTS,
        BatchSource::ActiveSubjects,
    ))
    .unwrap();
    let Created::New(row) = created else {
        panic!("new batch")
    };
    // Two calls of two pages: 40 enqueued by the answer, which says it is filling.
    assert_eq!((row.total, row.filling), (40, 1));
    tick(&store, now + 60_000);
    tick(&store, now + 120_000);
    assert_eq!(fill_state(&store, "big-adhoc"), (75, false, 75));
    // The default calls fill a batch that fits them before the answer.
    let store = small_pages(Store::new(store.into_db()), 10, 2, 20);
    let Created::New(row) = block_on(store.create_batch(
        "adhoc-2",
        "whole",
        now,
        MAX_ATTEMPTS,
        BatchSource::ActiveSubjects,
    ))
    .unwrap() else {
        panic!("new batch")
    };
    assert_eq!((row.total, row.filling), (75, 0));
}

#[test]
fn a_batch_cancelled_while_filling_stops_filling_and_can_end() {
    let store = small_pages(setup(), 10, 1, 1);
    exec(&store, "DELETE FROM schedules");
    add_subjects(&store, "s", 35, "default", "UTC");
    let now = ms("2026-11-21T10:00:00Z");
    block_on(store.create_batch(
        "c1",
        "cancel-me",
        now,
        MAX_ATTEMPTS,
        BatchSource::ActiveSubjects,
    ))
    .unwrap();
    assert_eq!(fill_state(&store, "cancel-me"), (10, true, 10));
    exec(
        &store,
        "UPDATE batches SET status = 'cancelled' WHERE id = 'c1'",
    );
    tick(&store, now + 60_000);
    assert_eq!(
        fill_state(&store, "cancel-me"),
        (10, false, 10),
        "no more items"
    );
}
