//! A [`Db`] that charges every call to the invocation's subrequest budget as it
//! goes out, and refuses (`StoreError::OverBudget`, nothing sent) a call the budget
//! cannot pay. So the budget counts the calls really made, whatever a `Store`
//! method makes of them (`create_batch` is a `batch()` and a read: two calls).

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{Db, Param, StoreResult, Usage};
use crate::core::drain::budget::Budget;

pub struct Metered<D> {
    inner: D,
    budget: Budget,
}

impl<D: Db> Metered<D> {
    pub fn new(inner: D, budget: Budget) -> Metered<D> {
        Metered { inner, budget }
    }

    pub fn inner(&self) -> &D {
        &self.inner
    }

    pub fn into_inner(self) -> D {
        self.inner
    }

    /// The budget this store charges.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }
}

impl<D: Db> Db for Metered<D> {
    async fn query<T: DeserializeOwned>(
        &self,
        sql: &str,
        params: Vec<Param>,
    ) -> StoreResult<Vec<T>> {
        // Charged before it is sent, whatever its result: a failed call still went
        // out (or, failing before it left, is counted on the safe side).
        self.budget.charge_call()?;
        self.inner.query(sql, params).await
    }

    async fn batch_results(
        &self,
        statements: Vec<(&'static str, Vec<Param>)>,
    ) -> StoreResult<Vec<Vec<Value>>> {
        // A batch() is one call, however many statements it carries.
        self.budget.charge_call()?;
        self.inner.batch_results(statements).await
    }

    fn usage(&self) -> Usage {
        self.inner.usage()
    }
}
