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
        self.db
            .batch(vec![(
                sql::UPSERT_SUBJECTS,
                vec![Value::Array(rows).to_string().into(), now.into()],
            )])
            .await?;
        Ok(subjects.len() as i64)
    }

    pub async fn list_subjects(&self, after: &str, limit: i64) -> StoreResult<Vec<SubjectRow>> {
        self.db
            .query(sql::LIST_SUBJECTS, vec![after.into(), limit.into()])
            .await
    }

    pub async fn get_subject(&self, id: &str) -> StoreResult<Option<SubjectRow>> {
        Ok(self
            .db
            .query(sql::GET_SUBJECT, vec![id.into()])
            .await?
            .pop())
    }

    /// Returns whether the subject existed.
    pub async fn delete_subject(&self, id: &str) -> StoreResult<bool> {
        let rows: Vec<Id<String>> = self.db.query(sql::DELETE_SUBJECT, vec![id.into()]).await?;
        Ok(!rows.is_empty())
    }
}
