//! SQLite implementation of [`Db`] for host tests and tools: the same SQL files and
//! migrations as D1, on a real (bundled) SQLite.

use std::cell::{Cell, RefCell};
use std::path::Path;

use rusqlite::types::{ToSqlOutput, Value as SqlValue, ValueRef};
use rusqlite::{Connection, ToSql};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::{Db, Param, StoreError, StoreResult, Usage};

impl ToSql for Param {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self {
            Param::Int(v) => ToSqlOutput::Owned(SqlValue::Integer(*v)),
            Param::Text(v) => ToSqlOutput::Borrowed(ValueRef::Text(v.as_bytes())),
            Param::Null => ToSqlOutput::Owned(SqlValue::Null),
        })
    }
}

/// A parameter as bound: an integer as REAL when the database binds as D1 does.
struct Bound<'a> {
    param: &'a Param,
    numbers_as_real: bool,
}

impl ToSql for Bound<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        match self.param {
            Param::Int(v) if self.numbers_as_real => {
                Ok(ToSqlOutput::Owned(SqlValue::Real(*v as f64)))
            }
            param => param.to_sql(),
        }
    }
}

pub struct SqliteDb {
    conn: RefCell<Connection>,
    usage: Cell<Usage>,
    /// The last statement `query` ran and its parameters, so a test can ask SQLite
    /// how it planned exactly what the store sent (EXPLAIN QUERY PLAN).
    last_query: RefCell<Option<(String, Vec<Param>)>>,
    /// Bind integers as REAL, as D1 binds every JavaScript number (the Worker's
    /// integers reach it as `f64`): SQL doing arithmetic on a parameter must
    /// not depend on its being an INTEGER (see [`SqliteDb::bind_numbers_as_d1`]).
    numbers_as_real: Cell<bool>,
}

fn err(e: impl std::fmt::Display) -> StoreError {
    StoreError::Db(e.to_string())
}

impl SqliteDb {
    /// A fresh in-memory database with every migration applied. Foreign keys are
    /// enforced, as D1 enforces them in every query and migration.
    pub fn in_memory(migrations_dir: &Path) -> StoreResult<SqliteDb> {
        let conn = Connection::open_in_memory().map_err(err)?;
        conn.execute_batch("PRAGMA foreign_keys = ON")
            .map_err(err)?;
        conn.set_prepared_statement_cache_capacity(128);
        let db = SqliteDb {
            conn: RefCell::new(conn),
            usage: Cell::new(Usage::default()),
            last_query: RefCell::new(None),
            numbers_as_real: Cell::new(false),
        };
        db.apply_migrations(migrations_dir)?;
        Ok(db)
    }

    /// Apply `*.sql` files in name order, as `wrangler d1 migrations apply` does.
    pub fn apply_migrations(&self, dir: &Path) -> StoreResult<()> {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .map_err(err)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "sql"))
            .collect();
        files.sort();
        for file in files {
            let text = std::fs::read_to_string(&file).map_err(err)?;
            self.conn.borrow().execute_batch(&text).map_err(err)?;
        }
        Ok(())
    }

    /// From now on bind integer parameters as REAL, as D1 does with the
    /// JavaScript numbers the Worker sends: `?1 * rate` is then a REAL, and a
    /// division by it no longer an integer division, unless the SQL casts.
    pub fn bind_numbers_as_d1(&self) {
        self.numbers_as_real.set(true);
    }

    /// The last statement run by `query`, with its parameters.
    pub fn last_query(&self) -> Option<(String, Vec<Param>)> {
        self.last_query.borrow().clone()
    }

    /// Direct access for tests that set up or inspect rows.
    pub fn conn(&self) -> std::cell::Ref<'_, Connection> {
        self.conn.borrow()
    }

    fn count(&self, statements: i64, rows_written: i64) {
        let mut u = self.usage.get();
        u.add_call(statements, rows_written);
        self.usage.set(u);
    }

    fn run<T: DeserializeOwned>(
        conn: &Connection,
        sql: &str,
        params: &[Param],
        numbers_as_real: bool,
    ) -> StoreResult<Vec<T>> {
        // Cached: the claim's statement takes far longer to compile than to run.
        let mut stmt = conn.prepare_cached(sql).map_err(err)?;
        let names: Vec<String> = stmt.column_names().iter().map(|s| s.to_string()).collect();
        let bound = params.iter().map(|param| Bound {
            param,
            numbers_as_real,
        });
        let mut rows = stmt.query(rusqlite::params_from_iter(bound)).map_err(err)?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(err)? {
            let mut obj = Map::new();
            for (i, name) in names.iter().enumerate() {
                let v = match row.get_ref(i).map_err(err)? {
                    ValueRef::Null => Value::Null,
                    ValueRef::Integer(n) => Value::from(n),
                    ValueRef::Real(f) => Value::from(f),
                    ValueRef::Text(t) => Value::from(String::from_utf8_lossy(t).into_owned()),
                    ValueRef::Blob(_) => {
                        return Err(StoreError::Json("blob columns are not used".into()))
                    }
                };
                obj.insert(name.clone(), v);
            }
            out.push(
                serde_json::from_value(Value::Object(obj))
                    .map_err(|e| StoreError::Json(e.to_string()))?,
            );
        }
        Ok(out)
    }

    /// Rows changed by the last statement, as D1's `rows_written` approximates it.
    fn total_changes(conn: &Connection) -> i64 {
        conn.query_row("SELECT total_changes()", [], |r| r.get(0))
            .unwrap_or(0)
    }
}

impl Db for SqliteDb {
    async fn query<T: DeserializeOwned>(
        &self,
        sql: &str,
        params: Vec<Param>,
    ) -> StoreResult<Vec<T>> {
        *self.last_query.borrow_mut() = Some((sql.to_string(), params.clone()));
        let conn = self.conn.borrow();
        let before = Self::total_changes(&conn);
        let out = Self::run(&conn, sql, &params, self.numbers_as_real.get())?;
        self.count(1, Self::total_changes(&conn) - before);
        Ok(out)
    }

    async fn batch_results(
        &self,
        statements: Vec<(&'static str, Vec<Param>)>,
    ) -> StoreResult<Vec<Vec<Value>>> {
        let mut conn = self.conn.borrow_mut();
        let before = Self::total_changes(&conn);
        let n = statements.len() as i64;
        let tx = conn.transaction().map_err(err)?;
        let mut results = Vec::with_capacity(statements.len());
        for (sql, params) in &statements {
            *self.last_query.borrow_mut() = Some((sql.to_string(), params.clone()));
            results.push(Self::run::<Value>(
                &tx,
                sql,
                params,
                self.numbers_as_real.get(),
            )?);
        }
        tx.commit().map_err(err)?;
        self.count(n, Self::total_changes(&conn) - before);
        Ok(results)
    }

    fn usage(&self) -> Usage {
        self.usage.get()
    }
}
