//! The e2e suite's report: one `ok - <name>` or `FAIL - <name>: <why>` line per
//! check as it happens, and a closing `N passed, M failed` line that CI reads.

/// An error as a check's reason: the whole chain on one line.
pub fn text(e: anyhow::Error) -> String {
    format!("{e:#}")
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
}
