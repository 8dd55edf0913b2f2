//! Running one claimed item for the drain: a signed `POST /internal/run` through
//! the `SELF` binding (its own invocation, abandoned when its watchdog fires), or
//! the job inline (inline mode, and kinds that run in the drain: `service`).

use worker::{web_sys, Fetcher, Request};

use super::config::Config;
use super::run::{run_with_timeout, Runner};
use super::{clock, SELF_ORIGIN};
use crate::core::batch::model::{ClaimedItem, Outcome, Ran};
use crate::core::drain::Refused;
use crate::core::{batch::receipts, drain::dispatch};

/// Abandons dispatches that outlive their limit: the platform's own
/// `AbortSignal.timeout`, one per cohort of dispatches (`core::watchdog`; the drain
/// machine says when a cohort starts). One per dispatch crashed fast drains on the
/// runtime's cap of live timers.
pub struct Watchdog {
    limit_ms: i64,
    current: Option<web_sys::AbortSignal>,
}

impl Watchdog {
    pub fn new(limit_ms: i64) -> Watchdog {
        Watchdog {
            limit_ms,
            current: None,
        }
    }

    /// The signal for the next dispatch: a new timer if a cohort starts with it.
    pub fn signal(&mut self, new_cohort: bool) -> web_sys::AbortSignal {
        match &self.current {
            Some(signal) if !new_cohort => signal.clone(),
            _ => {
                let signal = web_sys::AbortSignal::timeout_with_u32(self.limit_ms as u32);
                self.current = Some(signal.clone());
                signal
            }
        }
    }
}

/// Run one claimed item for the invocation `invocation`: through SELF (its own
/// invocation, abandoned when the signal fires) or inline. `Err`: the platform
/// refused the SELF call. A kind that runs in the drain (`Job::runs_in_drain`:
/// `service`) is run here even in fanout mode: its one call is an invocation of
/// its own already, and a SELF child in between would be a second
/// (docs/architecture/jobs-and-http.md, "Service items").
pub async fn execute(
    cfg: &Config,
    runner: Runner<'_>,
    via: Option<(&Fetcher, web_sys::AbortSignal)>,
    item: ClaimedItem,
    invocation: &str,
) -> (ClaimedItem, Result<Ran, Refused>) {
    let via = via.filter(|_| !runner.jobs.runs_in_drain(&item.kind));
    let ran = match via {
        // The child enforces the job timeout; the dispatch's own limit only guards
        // against a child that never answers.
        Some((service, signal)) => {
            dispatch(service, &cfg.secrets.dispatch, &item, invocation, &signal).await
        }
        None => Ok(run_with_timeout(&item, cfg, runner, Some(invocation)).await),
    };
    (item, ran)
}

/// One signed `POST /internal/run` through the SELF binding, abandoned when
/// `signal` (the drain's [`Watchdog`]) fires. `Err`: the call threw without our
/// watchdog having fired: the platform refused it (a request may make only so many
/// service-binding calls), so no child ran. The body names `invocation`, signed
/// with the item (`core::dispatch::Dispatched`).
pub(super) async fn dispatch(
    service: &Fetcher,
    secret: &str,
    item: &ClaimedItem,
    invocation: &str,
    signal: &web_sys::AbortSignal,
) -> Result<Ran, Refused> {
    let item_json = match dispatch::dispatched_json(invocation, item) {
        Ok(b) => b,
        Err(e) => return Ok(Outcome::Retry(format!("cannot encode item: {e}")).into()),
    };
    // Signature and item travel in the body, which trace events do not record
    // (core::dispatch).
    let request = signed_self_request(secret, "/internal/run", &item_json, Some(signal));
    let response = match request {
        Ok(req) => match service.fetch_request(req).await {
            Ok(r) => r,
            // Our watchdog's abort: the child was reached and did not answer in
            // time, an attempt like any other. (A refusal that comes just as the
            // cohort's timer fires is counted so too: the safe side.)
            Err(e) if signal.aborted() => {
                return Ok(Outcome::Retry(format!("dispatch failed: {e}")).into())
            }
            // Thrown before any answer without our abort: the platform refused
            // the call, so no child ran.
            Err(e) => return Err(Refused(e.to_string())),
        },
        Err(e) => {
            return Ok(Outcome::Retry(format!("cannot build dispatch request: {e:?}")).into())
        }
    };
    // The outcome is in the headers; the body is never read (core::dispatch).
    if response.status_code() != dispatch::OUTCOME_STATUS {
        let status = response.status_code();
        return Ok(Outcome::Retry(format!("dispatch answered HTTP {status}")).into());
    }
    let header = |name: &str| response.headers().get(name).ok().flatten();
    let outcome = dispatch::decode(
        header(dispatch::OUTCOME_HEADER).as_deref(),
        header(dispatch::REASON_HEADER).as_deref(),
    );
    // Channel results travel with the outcome (kinds with channels only).
    let channels = header(receipts::HEADER)
        .map(|value| receipts::decode_header(&value))
        .transpose();
    // A delay that does not parse is no delay: the backoff applies.
    let retry_after_ms =
        dispatch::decode_retry_after(header(dispatch::RETRY_AFTER_HEADER).as_deref());
    let refused = dispatch::decode_refused(header(dispatch::REFUSED_HEADER).as_deref());
    let paced = dispatch::decode_paced(header(dispatch::PACED_HEADER).as_deref());
    let paced_keys = dispatch::decode_paced_keys(header(dispatch::PACED_KEYS_HEADER).as_deref())
        .filter(|_| paced.is_some());
    Ok(match (outcome, channels) {
        (Ok(outcome), Ok(channels)) => Ran {
            outcome,
            channels,
            retry_after_ms,
            own_delay: false,
            refused,
            paced,
            paced_keys,
        },
        // Without readable results every channel not known delivered is sent
        // again: a duplicate, never a loss.
        (Err(e), _) | (_, Err(e)) => {
            Outcome::Retry(format!("unreadable dispatch answer: {e}")).into()
        }
    })
}

/// A `POST` of `body` to `path` on SELF, signed as a dispatch (the signature on
/// the body's first line, `core::dispatch`), aborted by `signal` if given.
pub(super) fn signed_self_request(
    secret: &str,
    path: &str,
    body: &str,
    signal: Option<&web_sys::AbortSignal>,
) -> Result<Request, worker::wasm_bindgen::JsValue> {
    let wire = dispatch::request(secret, clock::wall_ms() / 1_000, body);
    let headers = web_sys::Headers::new()?;
    for (name, value) in &wire.headers {
        headers.set(name, value)?;
    }
    let init = web_sys::RequestInit::new();
    init.set_method("POST");
    init.set_body(&wire.body.into());
    init.set_headers(&headers);
    init.set_signal(signal);
    web_sys::Request::new_with_str_and_init(&format!("{SELF_ORIGIN}{path}"), &init)
        .map(Request::from)
}
