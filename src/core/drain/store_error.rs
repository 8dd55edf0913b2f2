//! What a store call can fail with, as the drain handles it: the store (D1 or
//! SQLite) returns it, the drain's machine decides what each failure means.

use std::fmt;

use crate::core::drain::budget::OverBudget;

/// A store failure. Messages may contain SQL detail: log them, never send them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// The database failed the call (D1's or SQLite's message).
    Db(String),
    /// The subrequest budget could not pay for the call; nothing was sent.
    OverBudget(OverBudget),
    /// A row the store had just written was not there.
    Missing(String),
    /// A row or a parameter did not convert from or to JSON.
    Json(String),
    /// The call was refused before anything was sent: what it asked for breaks a
    /// rule the schema no longer enforces (e.g. a subject twice in one batch).
    Invalid(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Db(message) => f.write_str(message),
            StoreError::OverBudget(e) => write!(f, "not sent: {e}"),
            StoreError::Missing(what) => write!(f, "{what} is missing"),
            StoreError::Json(message) => write!(f, "JSON: {message}"),
            StoreError::Invalid(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for StoreError {}

impl StoreError {
    /// Whether a batch's insert failed because another batch holds the id drawn
    /// for it (`sql/create_batch.sql`: UNIQUE on `batches.id`, or on its key when
    /// the key's batch holds that very id): nothing was written, and a fresh id
    /// may succeed. D1 passes SQLite's message on.
    pub fn is_batch_id_taken(&self) -> bool {
        matches!(self, StoreError::Db(m) if m.contains("UNIQUE constraint failed: batches."))
    }
}

impl From<OverBudget> for StoreError {
    fn from(e: OverBudget) -> StoreError {
        StoreError::OverBudget(e)
    }
}
