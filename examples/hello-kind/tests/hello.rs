//! The `hello` kind on the host, through `cron_fanout::testing`: its greeting
//! from the Worker's `[vars]`, retries as asked, then done.

use cron_fanout::jobs::Outcome;
use cron_fanout::testing::{self, Harness};
use hello_kind::{fanout, Hello};
use serde_json::json;

fn greeted() -> Harness {
    let h = Harness::new();
    h.var("HELLO_GREETING", "Hello");
    h
}

#[test]
fn without_its_greeting_var_a_run_fails_for_good() {
    let ran = Harness::new().run(&Hello, testing::item(json!({"name": "ada"})));
    assert_eq!(
        ran.outcome,
        Outcome::Fail("HELLO_GREETING is not set".into())
    );
}

#[test]
fn it_retries_as_many_times_as_asked_then_is_done() {
    let h = greeted();
    let ada = || testing::item(json!({"name": "ada", "retries": 2}));
    assert_eq!(
        h.run(&Hello, ada().attempt(2)).outcome,
        Outcome::Retry("Hello, ada: not yet".into())
    );
    assert_eq!(h.run(&Hello, ada().attempt(3)).outcome, Outcome::Done);
}

#[test]
fn told_to_fail_it_fails_for_good() {
    let ran = greeted().run(&Hello, testing::item(json!({"name": "bo", "fail": true})));
    assert_eq!(ran.outcome, Outcome::Fail("Hello, bo: told to fail".into()));
}

#[test]
fn once_greets_a_subject_once_and_kv_remembers_the_batch() {
    let h = greeted();
    h.bind_kv("HELLO_SEEN");
    let cy = |batch: &str| {
        testing::item(json!({"name": "cy", "once": true}))
            .subject("s-cy")
            .batch(batch)
    };
    assert_eq!(h.run(&Hello, cy("b1")).outcome, Outcome::Done);
    assert_eq!(h.kv_value("HELLO_SEEN", "s-cy").as_deref(), Some("b1"));
    assert_eq!(
        h.run(&Hello, cy("b2")).outcome,
        Outcome::Fail("Hello, cy: greeted before (batch b1)".into())
    );
    // Without the binding: a failure that names it.
    assert_eq!(
        greeted().run(&Hello, cy("b1")).outcome,
        Outcome::Fail(r#"no KV namespace is bound as "HELLO_SEEN""#.into())
    );
}

#[test]
fn its_payload_is_checked_when_written() {
    assert!(testing::check(&Hello, json!({"name": "ada"})).is_ok());
    assert_eq!(
        testing::check(&Hello, json!({"name": " "})).unwrap_err(),
        "name must be 1 to 64 bytes"
    );
    assert!(testing::check(&Hello, json!({"name": "ada", "retries": 4})).is_err());
    assert!(testing::check(&Hello, json!({"name": "ada", "x": 1})).is_err());
}

#[test]
fn the_workers_registry_runs_it_beside_the_built_in_kinds() {
    let item = testing::item(json!({"name": "ada"})).kind("hello");
    assert_eq!(
        greeted().run_in(fanout().jobs(), item).outcome,
        Outcome::Done
    );
}
