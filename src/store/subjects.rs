//! Subjects: what batches over subjects are filled from.

use super::*;

impl<D: Db> Store<D> {
    /// Upsert validated subjects in one statement; returns how many were written.
    pub async fn upsert_subjects(&self, subjects: &[SubjectInput], now: i64) -> StoreResult<i64> {
        let rows: Vec<Value> = subjects
            .iter()
            .map(|s| {
                json!({"id": s.id, "kind": s.kind, "payload": s.payload.to_string(),
                       "active": i64::from(s.active), "group": s.group,
                       "timezone": s.timezone, "seed": subject_seed(&s.id)})
            })
            .collect();
        let subjects_json = Value::Array(rows).to_string();
        self.db
            .batch(vec![sql::UpsertSubjects {
                subjects: subjects_json,
                now,
            }
            .bind()])
            .await?;
        Ok(subjects.len() as i64)
    }

    pub async fn list_subjects(&self, after: &str, limit: i64) -> StoreResult<Vec<SubjectRow>> {
        self.db.run(sql::ListSubjects { after, limit }).await
    }

    pub async fn get_subject(&self, id: &str) -> StoreResult<Option<SubjectRow>> {
        Ok(self.db.run(sql::GetSubject { id }).await?.pop())
    }

    /// Returns whether the subject existed.
    pub async fn delete_subject(&self, id: &str) -> StoreResult<bool> {
        let rows: Vec<Id<String>> = self.db.run(sql::DeleteSubject { id }).await?;
        Ok(!rows.is_empty())
    }
}
