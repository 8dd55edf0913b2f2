//! `<repo>/.dev.vars`: the local secrets `wrangler dev` reads (KEY="value" lines).
//! The demo reads the same values so it can call the API and check signatures;
//! missing secrets are generated. Values are never printed.

use anyhow::{Context, Result};
use rand::RngCore;
use std::collections::BTreeMap;
use std::fs;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

/// The secrets the Worker needs.
pub const SECRETS: [&str; 3] = ["ADMIN_TOKEN", "DISPATCH_SECRET", "WEBHOOK_SECRET"];

/// Parses `KEY=value`, `KEY="value"` and `KEY='value'` lines; `#` comments and
/// blank lines are skipped (the dotenv subset wrangler documents for .dev.vars).
pub fn parse(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.strip_prefix("export ").unwrap_or(l).split_once('='))
        .map(|(k, v)| {
            let v = v.trim();
            let unquoted = [('"', '"'), ('\'', '\'')]
                .iter()
                .find_map(|&(a, b)| v.strip_prefix(a).and_then(|v| v.strip_suffix(b)))
                .unwrap_or(v);
            (k.trim().to_string(), unquoted.to_string())
        })
        .collect()
}

/// 32 random bytes as hex.
pub fn random_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// Reads `.dev.vars`, appending a random value for every missing secret (the
/// file is created with mode 0600 if absent). Returns all its variables and
/// the names that were generated.
pub fn load_or_create(repo: &Path) -> Result<(BTreeMap<String, String>, Vec<&'static str>)> {
    let path = repo.join(".dev.vars");
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut vars = parse(&text);
    let missing: Vec<&'static str> = SECRETS
        .into_iter()
        .filter(|k| !vars.contains_key(*k))
        .collect();
    if !missing.is_empty() {
        let mut file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("writing {}", path.display()))?;
        if !text.is_empty() && !text.ends_with('\n') {
            writeln!(file)?;
        }
        for key in &missing {
            let value = random_secret();
            writeln!(file, "{key}=\"{value}\"")?;
            vars.insert(key.to_string(), value);
        }
    }
    Ok((vars, missing))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_dotenv_subset() {
        let vars = parse("# c\nA=\"x=y\"\n B = 'z' \nexport C=plain\n\nnot a line\n");
        assert_eq!(vars["A"], "x=y");
        assert_eq!(vars["B"], "z");
        assert_eq!(vars["C"], "plain");
        assert_eq!(vars.len(), 3);
    }

    #[test]
    fn creates_and_completes_the_file() {
        let dir = std::env::temp_dir().join(format!("loadtest-devvars-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(".dev.vars"), "ADMIN_TOKEN=\"keep\"").unwrap();
        let (vars, generated) = load_or_create(&dir).unwrap();
        assert_eq!(vars["ADMIN_TOKEN"], "keep");
        assert_eq!(generated, ["DISPATCH_SECRET", "WEBHOOK_SECRET"]);
        assert_eq!(vars["WEBHOOK_SECRET"].len(), 64);
        // A second load generates nothing and reads the same values back.
        let (again, generated) = load_or_create(&dir).unwrap();
        assert!(generated.is_empty());
        assert_eq!(again, vars);
        fs::remove_dir_all(&dir).unwrap();
    }
}
