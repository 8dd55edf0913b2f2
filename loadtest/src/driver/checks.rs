//! The e2e suite's report and its driver: each part is a fixture and a list of
//! named checks (`check!`), run in order by `Checks::run`; one `ok - <name>` or
//! `FAIL - <name>: <why>` line per check as it happens, and a closing
//! `N passed, M failed` line that CI reads.

use std::future::Future;
use std::pin::Pin;

/// An error as a check's reason: the whole chain on one line.
pub fn text(e: anyhow::Error) -> String {
    format!("{e:#}")
}

/// What a check function returns: its verdict, borrowing the part's fixture.
pub type Verdict<'a> = Pin<Box<dyn Future<Output = anyhow::Result<()>> + 'a>>;

/// How a check runs against its part's fixture (with the case it was given, for
/// a check of one row of a table).
pub type Run<'f, F> = Box<dyn for<'a> FnOnce(&'a mut F) -> Verdict<'a> + 'f>;

/// One behaviour of an e2e part: the line the report prints, and the function
/// that checks it against the part's fixture (which it may carry on, for the
/// checks after it). A `needed` check's failure ends its list: what follows
/// depends on it.
pub struct Check<'f, F> {
    pub name: String,
    pub run: Run<'f, F>,
    pub needed: bool,
}

impl<'f, F> Check<'f, F> {
    /// A check of `run`: what `check!` builds.
    pub fn new(
        name: impl Into<String>,
        needed: bool,
        run: impl for<'a> FnOnce(&'a mut F) -> Verdict<'a> + 'f,
    ) -> Check<'f, F> {
        Check {
            name: name.into(),
            run: Box::new(run),
            needed,
        }
    }

    /// A check of one case of a table: `run(fixture, case)`.
    pub fn case<D: 'f>(
        name: impl Into<String>,
        case: D,
        run: for<'a> fn(&'a mut F, D) -> Verdict<'a>,
    ) -> Check<'f, F>
    where
        F: 'f,
    {
        Check::new(name, false, move |fixture| run(fixture, case))
    }
}

/// `check!(name, f)`: a [`Check`] of `async fn f(&mut Fixture) -> Result<()>`;
/// `check!(needed name, f)` for one the rest of its list depends on;
/// `check!(name, f, case)` for `async fn f(&mut Fixture, Case) -> Result<()>`,
/// one row of a table.
#[macro_export]
macro_rules! check {
    (needed $name:expr, $f:path) => {
        $crate::driver::checks::Check::new($name, true, |fixture| Box::pin($f(fixture)))
    };
    ($name:expr, $f:path, $case:expr) => {
        $crate::driver::checks::Check::case($name, $case, |fixture, case| {
            Box::pin($f(fixture, case))
        })
    };
    ($name:expr, $f:path) => {
        $crate::driver::checks::Check::new($name, false, |fixture| Box::pin($f(fixture)))
    };
}

#[derive(Debug, Default)]
pub struct Checks {
    passed: usize,
    failed: usize,
}

impl Checks {
    /// Records and prints one check. Returns whether it passed, so a scenario can
    /// skip what depends on it.
    pub fn record(&mut self, name: &str, result: Result<(), String>) -> bool {
        match result {
            Ok(()) => {
                self.passed += 1;
                println!("ok - {name}");
                true
            }
            Err(why) => {
                self.failed += 1;
                // One line per check keeps the report greppable.
                println!("FAIL - {name}: {}", why.replace('\n', " | "));
                false
            }
        }
    }

    /// Records an `anyhow` step result (setup, API calls) as a check.
    pub fn step<T>(&mut self, name: &str, result: anyhow::Result<T>) -> Option<T> {
        match result {
            Ok(v) => {
                self.record(name, Ok(()));
                Some(v)
            }
            Err(e) => {
                self.record(name, Err(text(e)));
                None
            }
        }
    }

    /// Runs a part's checks in order against its fixture, one report line each.
    /// A failed check does not stop the others unless it is `needed`; then the
    /// rest are named as skipped. Returns whether every check ran and passed.
    pub async fn run<F>(&mut self, fixture: &mut F, list: Vec<Check<'_, F>>) -> bool {
        let mut all = true;
        let mut list = list.into_iter();
        while let Some(check) = list.next() {
            let verdict = (check.run)(fixture).await;
            let passed = self.record(&check.name, verdict.map_err(text));
            all &= passed;
            if !passed && check.needed {
                for skipped in list {
                    println!("# skipped (needs \"{}\"): {}", check.name, skipped.name);
                }
                return false;
            }
        }
        all
    }

    pub fn all_passed(&self) -> bool {
        self.failed == 0
    }

    /// `N passed, M failed`.
    pub fn summary(&self) -> String {
        format!("{} passed, {} failed", self.passed, self.failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_summary() {
        let mut c = Checks::default();
        assert!(c.record("a", Ok(())));
        assert!(!c.record("b", Err("why".into())));
        assert_eq!(c.step("c", anyhow::Ok(5)), Some(5));
        assert_eq!(c.step::<()>("d", Err(anyhow::anyhow!("boom"))), None);
        assert_eq!(c.summary(), "2 passed, 2 failed");
        assert!(!c.all_passed());
    }

    struct Fixture {
        seen: Vec<&'static str>,
    }

    async fn passes(f: &mut Fixture) -> anyhow::Result<()> {
        f.seen.push("passes");
        Ok(())
    }

    async fn fails(f: &mut Fixture) -> anyhow::Result<()> {
        f.seen.push("fails");
        anyhow::bail!("because")
    }

    async fn sees(f: &mut Fixture, case: &'static str) -> anyhow::Result<()> {
        f.seen.push(case);
        anyhow::ensure!(case != "bad", "case {case}");
        Ok(())
    }

    #[tokio::test]
    async fn a_check_of_a_case_gets_its_own_row() {
        let mut c = Checks::default();
        let mut f = Fixture { seen: vec![] };
        let list = ["one", "bad", "two"]
            .into_iter()
            .map(|case| check!(format!("case {case}"), sees, case))
            .collect();
        assert!(!c.run(&mut f, list).await);
        assert_eq!(f.seen, ["one", "bad", "two"]);
        assert_eq!(c.summary(), "2 passed, 1 failed");
    }

    #[tokio::test]
    async fn runs_every_check_in_order_past_a_failure_and_stops_after_a_needed_one() {
        let mut c = Checks::default();
        let mut f = Fixture { seen: vec![] };
        let all = c
            .run(&mut f, vec![check!("a", fails), check!("b", passes)])
            .await;
        assert!(!all);
        assert_eq!(f.seen, ["fails", "passes"]);
        assert_eq!(c.summary(), "1 passed, 1 failed");

        let all = c
            .run(&mut f, vec![check!(needed "c", fails), check!("d", passes)])
            .await;
        assert!(!all);
        assert_eq!(f.seen, ["fails", "passes", "fails"]);
        assert_eq!(c.summary(), "1 passed, 2 failed");
    }
}
