//! Built-in kind `noop`: does nothing and succeeds. It exists to measure the
//! orchestration itself (claim, dispatch, commit) without any job cost.

use serde_json::Value;

use super::{Context, Job, Outcome};
use crate::core::security::target::TargetPolicy;

pub struct Noop;

impl Job for Noop {
    type Payload = Value;

    fn name(&self) -> &'static str {
        "noop"
    }

    fn validate(&self, payload: &Value, _targets: &TargetPolicy) -> Result<(), String> {
        if payload.is_object() {
            Ok(())
        } else {
            Err("noop payload must be a JSON object (it is ignored)".into())
        }
    }

    async fn run(&self, _ctx: &Context<'_>, _payload: Value) -> Outcome {
        Outcome::Done
    }

    fn subrequests_per_run(&self) -> i64 {
        0
    }
}
