//! Built-in kind `noop`: does nothing and succeeds. It exists to measure the
//! orchestration itself (claim, dispatch, commit) without any job cost.

use serde_json::Value;

use super::JobKind;
#[cfg(target_arch = "wasm32")]
use crate::core::model::{ClaimedItem, Outcome, Ran};
use crate::core::target::TargetPolicy;

pub struct Noop;

impl JobKind for Noop {
    fn name(&self) -> &'static str {
        "noop"
    }

    fn validate(&self, payload: &Value, _policy: &TargetPolicy) -> Result<(), String> {
        if payload.is_object() {
            Ok(())
        } else {
            Err("noop payload must be a JSON object (it is ignored)".into())
        }
    }

    fn subrequests_per_run(&self) -> i64 {
        0
    }

    #[cfg(target_arch = "wasm32")]
    fn run<'a>(
        &'a self,
        _ctx: &'a super::JobContext,
        _item: &'a ClaimedItem,
    ) -> futures::future::LocalBoxFuture<'a, Ran> {
        Box::pin(async { Outcome::Done.into() })
    }
}
