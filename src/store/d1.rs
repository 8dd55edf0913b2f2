//! D1 implementation of [`Db`]: every call is one subrequest (charged by
//! `metered::Metered` when it wraps this); `meta.rows_written` and `meta.rows_read`
//! feed the cost accounting.

use std::cell::Cell;

use serde::de::DeserializeOwned;
use serde_json::Value;
use worker::wasm_bindgen::JsValue;
use worker::{D1Database, D1PreparedStatement, D1Result};

use super::{Db, Param, StoreError, StoreResult, Usage};

pub struct D1Db {
    db: D1Database,
    usage: Cell<Usage>,
}

impl D1Db {
    pub fn new(db: D1Database) -> D1Db {
        D1Db {
            db,
            usage: Cell::new(Usage::default()),
        }
    }

    fn prepare(&self, sql: &str, params: &[Param]) -> StoreResult<D1PreparedStatement> {
        let values: Vec<JsValue> = params
            .iter()
            .map(|p| match p {
                // Exact for |v| < 2^53: millisecond timestamps and ids fit easily.
                Param::Int(v) => JsValue::from_f64(*v as f64),
                Param::Text(s) => JsValue::from_str(s),
                Param::Null => JsValue::NULL,
            })
            .collect();
        self.db.prepare(sql).bind(&values).map_err(d1_error)
    }

    fn count(&self, statements: i64, results: &[&D1Result]) {
        let metas: Vec<_> = results
            .iter()
            .filter_map(|r| r.meta().ok().flatten())
            .collect();
        let written: i64 = metas
            .iter()
            .map(|m| m.rows_written.unwrap_or(0) as i64)
            .sum();
        let read: i64 = metas.iter().map(|m| m.rows_read.unwrap_or(0) as i64).sum();
        let mut u = self.usage.get();
        u.add_call(statements, written);
        u.rows_read += read;
        self.usage.set(u);
    }
}

fn d1_error(e: worker::Error) -> StoreError {
    StoreError::Db(format!("D1: {e}"))
}

impl Db for D1Db {
    async fn query<T: DeserializeOwned>(
        &self,
        sql: &str,
        params: Vec<Param>,
    ) -> StoreResult<Vec<T>> {
        let stmt = self.prepare(sql, &params)?;
        let result = stmt.all().await;
        // A failed call still went out: it counts against the budget.
        let result = match result {
            Ok(r) => r,
            Err(e) => {
                self.count(1, &[]);
                return Err(d1_error(e));
            }
        };
        self.count(1, &[&result]);
        if let Some(e) = result.error() {
            return Err(StoreError::Db(format!("D1: {e}")));
        }
        result
            .results::<T>()
            .map_err(|e| StoreError::Json(e.to_string()))
    }

    async fn batch_results(
        &self,
        statements: Vec<(&'static str, Vec<Param>)>,
    ) -> StoreResult<Vec<Vec<Value>>> {
        let n = statements.len() as i64;
        let prepared = statements
            .iter()
            .map(|(sql, params)| self.prepare(sql, params))
            .collect::<StoreResult<Vec<_>>>()?;
        match self.db.batch(prepared).await {
            Ok(results) => {
                self.count(n, &results.iter().collect::<Vec<_>>());
                if let Some(e) = results.iter().find_map(|r| r.error()) {
                    return Err(StoreError::Db(format!("D1: {e}")));
                }
                results
                    .iter()
                    .map(|r| {
                        r.results::<Value>()
                            .map_err(|e| StoreError::Json(e.to_string()))
                    })
                    .collect()
            }
            Err(e) => {
                self.count(n, &[]);
                Err(d1_error(e))
            }
        }
    }

    fn usage(&self) -> Usage {
        self.usage.get()
    }
}
