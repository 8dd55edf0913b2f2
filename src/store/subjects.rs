//! Subjects: what batches over subjects are filled from.

use super::*;

/// A subject as `sql/upsert_subjects.sql` reads it: its fields and its jitter seed.
#[derive(Serialize)]
struct SubjectParam<'a> {
    #[serde(flatten)]
    subject: &'a SubjectInput,
    seed: i64,
}

/// The JSON parameter of `upsert_subjects.sql`.
fn subjects_json(subjects: &[SubjectInput]) -> String {
    let rows: Vec<SubjectParam> = subjects
        .iter()
        .map(|subject| SubjectParam {
            subject,
            seed: subject_seed(&subject.id),
        })
        .collect();
    serde_json::to_string(&rows).expect("a subject serialises")
}

impl<D: Db> Store<D> {
    /// Upsert validated subjects in one statement; returns how many were written.
    pub async fn upsert_subjects(&self, subjects: &[SubjectInput], now: i64) -> StoreResult<i64> {
        self.db
            .batch(vec![sql::UpsertSubjects {
                subjects: subjects_json(subjects),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The subjects' JSON carries every key `upsert_subjects.sql` reads: the payload
    /// as compact JSON text, `active` as a boolean, the jitter seed of the id.
    #[test]
    fn the_subjects_json_is_what_the_upsert_reads() {
        let subject = SubjectInput {
            id: "u-1".into(),
            kind: "noop".into(),
            payload: serde_json::json!({"a": [1, 2]}),
            active: false,
            group: "g".into(),
            timezone: "Europe/Paris".into(),
            limits: None,
            keys: Vec::new(),
        };
        let json = subjects_json(std::slice::from_ref(&subject));
        assert_carries_keys_read(&json, sql::UPSERT_SUBJECTS);
        let rows: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(rows[0]["payload"], r#"{"a":[1,2]}"#);
        assert_eq!(rows[0]["payload"], subject.payload.to_string());
        assert_eq!(rows[0]["active"], false);
        assert_eq!(rows[0]["seed"], subject_seed("u-1"));
    }
}
