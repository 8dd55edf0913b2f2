//! The drain's one loop: it asks `core::drain::Drain` what to do, hands each
//! action to its [`Ports`] (claim, dispatch, commit, a timer, the clock, jitter,
//! where reports go) and feeds back what they answer, until the machine is done.
//! The Worker's tick and queue consumer run it on the runtime's futures
//! (`edge::drain`); the drain simulation runs it in virtual time
//! (`tests/drain_simulation.rs`). No runtime here: every effect is a port.

use std::future::Future;

use crate::core::batch::model::{ClaimedItem, Ran, StopReason};
use crate::core::drain::{Action, Drain, Refused, Report, Settled};
use crate::store::StoreResult;

/// What woke the loop.
// Events hold items by value, each handled once as it arrives.
#[allow(clippy::large_enum_variant)]
pub enum Event {
    /// The claim started by [`Ports::claim`] answered; with the time to claim
    /// again when its limits held items back (`Drain::claimed_holding`).
    Claimed(StoreResult<Vec<ClaimedItem>>, Option<i64>),
    /// The commit started by [`Ports::commit`] answered; its rows come back with it.
    Committed(Vec<Settled>, StoreResult<Vec<i64>>),
    /// A dispatched item answered, or the platform refused its dispatch.
    Finished(ClaimedItem, Result<Ran, Refused>),
    /// The time the loop asked to wake at has come.
    Timer,
}

/// The effects the loop needs. Claims, commits and dispatches are started, not
/// awaited: their answers come back through [`Ports::wait`], so a D1 round trip
/// never stalls the calls in flight (one claim and one commit at a time).
pub trait Ports {
    /// The clock, in ms.
    fn now(&mut self) -> i64;
    /// Start this item (`new_watchdog`: it starts a new watchdog cohort).
    fn dispatch(&mut self, now: i64, item: ClaimedItem, new_watchdog: bool);
    /// Start a claim of up to `limit` due items under leases expiring at
    /// `lease_expires_at`.
    fn claim(&mut self, now: i64, limit: i64, lease_expires_at: i64);
    /// Start a group commit of these rows (`again`: after a failed attempt, also
    /// read back what that attempt applied).
    fn commit(&mut self, now: i64, rows: Vec<Settled>, again: bool);
    /// The next answer, or [`Event::Timer`] once `until` (if any) has come.
    fn wait(&mut self, until: Option<i64>) -> impl Future<Output = Event>;
    /// In [0, 1): spreads a retry's backoff.
    fn jitter(&mut self) -> f64;
    /// Something the machine reported (to log, or to check).
    fn report(&mut self, report: Report);
}

/// Run `machine` until it is done; returns why it stopped. Its tally stays in it.
pub async fn run<P: Ports>(machine: &mut Drain, ports: &mut P) -> StopReason {
    // A runtime's clock may move only with I/O: a fired timer has reached its
    // time even if the clock says otherwise, and time never runs backwards for
    // the machine.
    let mut floor = ports.now();
    loop {
        let now = ports.now().max(floor);
        let until = loop {
            match machine.poll(now) {
                Action::Dispatch { item, new_watchdog } => ports.dispatch(now, item, new_watchdog),
                Action::Claim {
                    limit,
                    lease_expires_at,
                } => ports.claim(now, limit, lease_expires_at),
                Action::Commit(rows) => ports.commit(now, rows, false),
                Action::CommitAgain(rows) => ports.commit(now, rows, true),
                Action::Wait(until) => break until,
                Action::Done(stop) => {
                    reports(machine, ports);
                    return stop;
                }
            }
        };
        reports(machine, ports);
        let event = ports.wait(until).await;
        let now = ports.now().max(floor);
        floor = now;
        match event {
            Event::Claimed(result, held_until) => machine.claimed_holding(now, result, held_until),
            Event::Committed(rows, result) => machine.committed(now, rows, result),
            Event::Finished(item, Ok(ran)) => {
                let jitter = ports.jitter();
                machine.finished(now, item, ran, jitter)
            }
            Event::Finished(item, Err(refused)) => {
                let jitter = ports.jitter();
                machine.refused(now, item, refused, jitter)
            }
            Event::Timer => {
                floor = until.map_or(now, |at| now.max(at));
                machine.timer(floor);
            }
        }
        reports(machine, ports);
    }
}

fn reports<P: Ports>(machine: &mut Drain, ports: &mut P) {
    while let Some(report) = machine.next_report() {
        ports.report(report);
    }
}
