//! What every command drives a Worker with: the Worker and sink a command talks
//! to (`target`), firing ticks until a batch reaches a state (`drive`), the steps
//! the suite, the runs and the demo share (`steps`), webhooks against a receiver
//! of a given rate (`receiver`) and against the fakes of real receivers
//! (`real_receiver`), what a batch seeds and must
//! end as (`plan`) and the pure checks of it (`verdict`), and the e2e report of
//! named checks (`checks`). It uses `sink` and `runtime` only.

pub mod checks;
pub mod drive;
pub mod plan;
pub mod real_receiver;
pub mod receiver;
pub mod steps;
pub mod target;
pub mod verdict;
