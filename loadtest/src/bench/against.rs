//! `loadtest bench --only-fanout --against <git rev>`: this checkout's fan-out
//! rounds interleaved with another revision's, on one machine, so a change is
//! measured against a fixed point and not only against the commit before it.
//!
//! The other revision is checked out in a worktree of its own under
//! `target/against/`, set up and built there by its own scripts (its release
//! Worker, its own harness built release), and each of its rounds is one run of
//! its own `loadtest bench --only-fanout --rounds 1`, whose round line (the same
//! format since the flag exists) is read back. The rounds alternate: this
//! checkout's, then the other's, round after round, so a machine's slow minute
//! falls on both.

use crate::bench::report::FanoutRound;
use crate::run::metrics::{self, ratio};
use crate::run::table::num;
use anyhow::{bail, ensure, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// One round's figures, whichever build ran it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoundFigures {
    pub items_per_second: f64,
    pub fanout_over_raw: f64,
    pub statements_per_item: f64,
    pub rows_written_per_item: f64,
}

impl RoundFigures {
    /// This checkout's round, as its round line reports it.
    pub fn of(round: &FanoutRound) -> Result<RoundFigures> {
        let d1 = &round.report.d1;
        Ok(RoundFigures {
            items_per_second: round
                .report
                .items_per_second
                .context("the round's batch has no items/s")?,
            fanout_over_raw: round
                .fanout_over_probe
                .context("the round has no fan-out/raw")?,
            statements_per_item: d1.statements_per_item.unwrap_or(f64::NAN),
            rows_written_per_item: d1.rows_written_per_item.unwrap_or(f64::NAN),
        })
    }

    /// Reads `round N: fan-out X items/s, probes A / B calls/s, fan-out/raw R,
    /// S statements and W rows written per item`, as `--only-fanout` prints it.
    pub fn parse(line: &str) -> Option<RoundFigures> {
        let rest = line.strip_prefix("round ")?;
        let rest = rest.split_once(": fan-out ")?.1;
        let (items, rest) = rest.split_once(" items/s, probes ")?;
        let rest = rest.split_once(" calls/s, fan-out/raw ")?.1;
        let (raw, rest) = rest.split_once(", ")?;
        let (statements, rest) = rest.split_once(" statements and ")?;
        let written = rest.strip_suffix(" rows written per item")?;
        Some(RoundFigures {
            items_per_second: items.trim().parse().ok()?,
            fanout_over_raw: raw.trim().parse().ok()?,
            statements_per_item: statements.trim().parse().ok()?,
            rows_written_per_item: written.trim().parse().ok()?,
        })
    }

    fn line(&self) -> String {
        format!(
            "fan-out {} items/s, fan-out/raw {}, {} statements and {} rows written per item",
            num(Some(self.items_per_second), 1),
            num(Some(self.fanout_over_raw), 3),
            num(Some(self.statements_per_item), 3),
            num(Some(self.rows_written_per_item), 3),
        )
    }
}

/// The other revision, built and ready to run rounds.
pub struct Other {
    pub rev: String,
    pub sha: String,
    dir: PathBuf,
    harness: PathBuf,
}

impl Other {
    /// Checks out `rev` of the repository at `repo` in `target/against/<sha>`
    /// (kept between runs: a second run only checks its build), then sets it up
    /// and builds its release Worker and its harness with its own scripts.
    pub fn build(repo: &Path, rev: &str) -> Result<Other> {
        let sha = git(
            repo,
            &["rev-parse", "--verify", &format!("{rev}^{{commit}}")],
        )
        .with_context(|| format!("`{rev}` is not a revision of {}", repo.display()))?;
        let dir = repo.join("target/against").join(&sha[..12]);
        if !dir.join(".git").exists() {
            // A worktree whose folder was deleted is still registered: forget it first.
            git(repo, &["worktree", "prune"])?;
            let path = dir.to_str().context("the worktree's path is not UTF-8")?;
            eprintln!("== --against {rev}: a worktree of {sha} in {path}");
            git(
                repo,
                &["worktree", "add", "--detach", "--force", path, &sha],
            )?;
        }
        eprintln!("== --against {rev}: its setup, release Worker and harness (its own scripts)");
        step(&dir, "bash", &["scripts/setup.sh"])?;
        step(&dir, "bash", &["scripts/build.sh"])?;
        step(
            &dir,
            "cargo",
            &["build", "-q", "--release", "-p", "loadtest"],
        )?;
        let harness = dir.join("target/release/loadtest");
        ensure!(harness.exists(), "no harness at {}", harness.display());
        Ok(Other {
            rev: rev.to_string(),
            sha,
            dir,
            harness,
        })
    }

    /// One round of its `--only-fanout` on a fresh runtime of its own.
    pub fn round(&self, items: usize, timeout_secs: u64) -> Result<RoundFigures> {
        let out = Command::new(&self.harness)
            .current_dir(&self.dir)
            .args(["bench", "--only-fanout", "--rounds", "1", "--repo"])
            .arg(&self.dir)
            .args(["--items", &items.to_string()])
            .args(["--timeout-secs", &timeout_secs.to_string()])
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .with_context(|| format!("running {}", self.harness.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            bail!("{}'s round failed ({}): {stdout}", self.rev, out.status);
        }
        stdout
            .lines()
            .find_map(RoundFigures::parse)
            .with_context(|| format!("{}'s round printed no round line: {stdout}", self.rev))
    }
}

/// Both builds' rounds, in the order they ran.
#[derive(Debug, Default)]
pub struct Interleaved {
    pub this: Vec<RoundFigures>,
    pub other: Vec<RoundFigures>,
}

impl Interleaved {
    /// The per-round lines, both medians, their ratio, and the verdict lines.
    pub fn report(&self, other: &Other) -> String {
        let mut out = String::new();
        for (i, (a, b)) in self.this.iter().zip(&self.other).enumerate() {
            out += &format!("round {}: this checkout: {}\n", i + 1, a.line());
            out += &format!(
                "round {}: {} ({}): {}\n",
                i + 1,
                other.rev,
                &other.sha[..12],
                b.line()
            );
        }
        let med = |v: &[RoundFigures], f: fn(&RoundFigures) -> f64| {
            metrics::median(&v.iter().map(f).collect::<Vec<_>>())
        };
        let spread = |v: &[RoundFigures], f: fn(&RoundFigures) -> f64| {
            let xs: Vec<f64> = v.iter().map(f).collect();
            let lo = xs.iter().copied().reduce(f64::min);
            let hi = xs.iter().copied().reduce(f64::max);
            format!("{} to {}", num(lo, 1), num(hi, 1))
        };
        let rate = |r: &RoundFigures| r.items_per_second;
        let raw = |r: &RoundFigures| r.fanout_over_raw;
        let (a_rate, b_rate) = (med(&self.this, rate), med(&self.other, rate));
        let (a_raw, b_raw) = (med(&self.this, raw), med(&self.other, raw));
        out += &format!(
            "median fan-out items/s: this checkout {} ({}), {} {} ({}); ratio {}\n",
            num(a_rate, 1),
            spread(&self.this, rate),
            other.rev,
            num(b_rate, 1),
            spread(&self.other, rate),
            num(a_rate.zip(b_rate).and_then(|(a, b)| ratio(a, b)), 3),
        );
        out += &format!(
            "median fan-out/raw: this checkout {}, {} {}; ratio {}\n",
            num(a_raw, 3),
            other.rev,
            num(b_raw, 3),
            num(a_raw.zip(b_raw).and_then(|(a, b)| ratio(a, b)), 3),
        );
        out
    }
}

fn git(repo: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("running git")?;
    ensure!(
        out.status.success(),
        "git {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A command in the other checkout, its output on this one's stderr (progress).
fn step(dir: &Path, program: &str, args: &[&str]) -> Result<()> {
    let status = Command::new(program)
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(std::io::stderr()))
        .stderr(Stdio::inherit())
        .status()
        .with_context(|| format!("running {program} in {}", dir.display()))?;
    ensure!(
        status.success(),
        "`{program} {}` in {} failed ({status})",
        args.join(" "),
        dir.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_round_line_of_only_fanout() {
        let line = "round 1: fan-out 1326.4 items/s, probes 4300.1 / 5012.7 calls/s, \
                    fan-out/raw 0.285, 0.027 statements and 3.005 rows written per item";
        assert_eq!(
            RoundFigures::parse(line),
            Some(RoundFigures {
                items_per_second: 1326.4,
                fanout_over_raw: 0.285,
                statements_per_item: 0.027,
                rows_written_per_item: 3.005,
            })
        );
        assert_eq!(
            RoundFigures::parse("median fan-out/raw 0.285 (0.2 to 0.3)"),
            None
        );
        assert_eq!(
            RoundFigures::parse(&line.replace("1326.4", "-")),
            None,
            "a round without items/s is no figure"
        );
    }
}
