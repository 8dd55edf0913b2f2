//! Jitter: each item of a schedule's batch starts up to `jitter_seconds` after the
//! fire instant, by an amount fixed per (fire, subject), so re-firing (which creates
//! nothing) could never move it and every run of the same fire agrees.
//!
//! It is computed inside each `INSERT … SELECT` of a fill's pages
//! (`sql/fill_group_page.sql`, `sql/fill_every_group_page.sql`) from two 31-bit
//! seeds: the subject's `jitter_seed` (stored on the row when the subject is first
//! written) and the fire's seed (from its batch key, stored in the batch's fill).
//! [`jitter_ms`] is the Rust twin of that SQL expression; the SQLite conformance
//! suite checks they agree.

/// FNV-1a, 32 bits: small, well spread for short similar strings (`user-1`,
/// `user-2`…), and the same on every platform, unlike `std`'s randomised hasher.
pub fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// The seed stored on a new subject (`subjects.jitter_seed`). 31 bits, so SQLite's
/// signed 64-bit arithmetic on it never overflows. Rows that existed before the
/// schedules migration got a random 31-bit seed instead: a seed only has to be fixed,
/// and hashing every id in SQL would make the migration's cost grow with id length.
pub fn subject_seed(subject_id: &str) -> i64 {
    i64::from(fnv1a32(subject_id.as_bytes()) & 0x7fff_ffff)
}

/// The seed of one fire, from its batch key (unique per fire).
pub fn fire_seed(batch_key: &str) -> i64 {
    i64::from(fnv1a32(batch_key.as_bytes()) & 0x7fff_ffff)
}

/// Milliseconds added to an item's `run_after`: `((subject XOR fire) mod (J + 1))`
/// whole seconds, in `[0, J]`. The SQL spells XOR as `(a | b) - (a & b)`.
pub fn jitter_ms(subject_seed: i64, fire_seed: i64, jitter_seconds: i64) -> i64 {
    ((subject_seed ^ fire_seed) % (jitter_seconds + 1)) * 1000
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn fnv1a_matches_the_published_test_vectors() {
        assert_eq!(fnv1a32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a32(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a32(b"foobar"), 0xbf9c_f968);
    }

    #[test]
    fn seeds_fit_31_bits_and_are_deterministic() {
        for id in ["", "a", "user-1", "é", "daily:2026-11-21"] {
            let s = subject_seed(id);
            assert!((0..1 << 31).contains(&s), "{id}: {s}");
            assert_eq!(s, subject_seed(id));
        }
        assert_ne!(fire_seed("d:2026-11-21"), fire_seed("d:2026-11-22"));
    }

    #[test]
    fn jitter_is_zero_without_a_window_and_within_it_otherwise() {
        let fire = fire_seed("digest:2026-11-21");
        for i in 0..1_000 {
            let s = subject_seed(&format!("user-{i}"));
            assert_eq!(jitter_ms(s, fire, 0), 0);
            let j = jitter_ms(s, fire, 600);
            assert!((0..=600_000).contains(&j) && j % 1000 == 0, "{j}");
            assert_eq!(j, jitter_ms(s, fire, 600), "deterministic");
        }
    }

    #[test]
    fn jitter_spreads_similar_ids_over_the_window() {
        // 1,000 draws from 601 values: a uniform spread leaves ~487 distinct values
        // and ~100 in each tenth of the window.
        let fire = fire_seed("digest:2026-11-21");
        let secs: Vec<i64> = (0..1_000)
            .map(|i| jitter_ms(subject_seed(&format!("user-{i}")), fire, 600) / 1000)
            .collect();
        let distinct: HashSet<_> = secs.iter().collect();
        assert!(distinct.len() > 400, "{} distinct", distinct.len());
        for tenth in 0..10 {
            let n = secs.iter().filter(|s| **s * 10 / 601 == tenth).count();
            assert!((50..=150).contains(&n), "tenth {tenth}: {n}");
        }
        // Another fire of the same schedule spreads the same subjects differently.
        let other = fire_seed("digest:2026-11-22");
        let moved = (0..1_000)
            .filter(|i| {
                let s = subject_seed(&format!("user-{i}"));
                jitter_ms(s, fire, 600) != jitter_ms(s, other, 600)
            })
            .count();
        assert!(moved > 900, "{moved}");
    }
}
