//! Aligned plain-text tables for the human-readable reports.

use std::fmt;

/// Rows of cells under optional section titles; within a section, columns are
/// padded to the widest cell so numbers line up.
#[derive(Debug, Default)]
pub struct Table {
    lines: Vec<Line>,
}

#[derive(Debug)]
enum Line {
    Section(String),
    Row(Vec<String>),
}

impl Table {
    pub fn section(&mut self, title: &str) -> &mut Table {
        self.lines.push(Line::Section(title.to_string()));
        self
    }

    pub fn row<S: ToString>(&mut self, cells: &[S]) -> &mut Table {
        self.lines
            .push(Line::Row(cells.iter().map(ToString::to_string).collect()));
        self
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Columns line up within a section; each section has its own widths.
        let mut widths: Vec<usize> = Vec::new();
        for (n, line) in self.lines.iter().enumerate() {
            match line {
                Line::Section(title) => {
                    writeln!(f, "{title}")?;
                    widths = column_widths(&self.lines[n + 1..]);
                }
                Line::Row(cells) => {
                    if widths.is_empty() {
                        widths = column_widths(&self.lines[n..]);
                    }
                    let padded: Vec<String> = cells
                        .iter()
                        .zip(&widths)
                        .map(|(c, w)| format!("{c:<w$}"))
                        .collect();
                    writeln!(f, "  {}", padded.join("  ").trim_end())?;
                }
            }
        }
        Ok(())
    }
}

/// The widest cell of each column among the rows up to the next section.
fn column_widths(lines: &[Line]) -> Vec<usize> {
    let mut widths: Vec<usize> = Vec::new();
    for line in lines {
        let Line::Row(cells) = line else { break };
        for (i, c) in cells.iter().enumerate() {
            let w = c.chars().count();
            match widths.get_mut(i) {
                Some(max) => *max = (*max).max(w),
                None => widths.push(w),
            }
        }
    }
    widths
}

/// `1234.5` as `1234.5`, `None` as `-`: optional measurements in a table.
pub fn num(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "-".to_string(), |v| format!("{v:.decimals$}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pads_columns_per_section() {
        let mut t = Table::default();
        t.row(&["top", "0"]);
        t.section("a").row(&["x", "1"]).row(&["yy", "2"]);
        t.section("b").row(&["longer", "22"]);
        assert_eq!(
            t.to_string(),
            "  top  0\na\n  x   1\n  yy  2\nb\n  longer  22\n"
        );
        assert_eq!(num(Some(2.345), 2), "2.35");
        assert_eq!(num(None, 1), "-");
    }
}
