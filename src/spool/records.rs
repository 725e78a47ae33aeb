//! What other layers keep in the spool as JSON: sessions (the session layer) and records by
//! kind and key (the Hindsight API's bank profiles and mental models).

use rusqlite::{params, OptionalExtension};

use super::{Spool, SpoolError};

impl Spool {
    /// Saves a session record (JSON owned by the session layer).
    pub async fn save_session(&self, id: &str, record: String) -> Result<(), SpoolError> {
        let id = id.to_owned();
        self.call(move |t| save_session_in(t, &id, &record)).await
    }

    /// Forgets a session record.
    pub async fn delete_session(&self, id: &str) -> Result<(), SpoolError> {
        let id = id.to_owned();
        self.call(move |t| t.execute("DELETE FROM sessions WHERE id = ?", [&id]).map(|_| ())).await
    }

    /// Saves (replacing) a record of `kind` under `key`. Refused when the spool's file was
    /// deleted or replaced under the daemon: saved there, a mental model or a bank's profile was
    /// answered 200 and gone at the next start.
    pub async fn save_record(&self, kind: &'static str, key: &str, record: String) -> Result<(), SpoolError> {
        self.still_there()?;
        let key = key.to_owned();
        self.call(move |t| {
            t.execute(
                "INSERT INTO records (kind, key, record) VALUES (?, ?, ?) ON CONFLICT(kind, key) DO UPDATE SET record = excluded.record",
                params![kind, key, record],
            )
            .map(|_| ())
        })
        .await
    }

    /// Deletes a record; whether there was one. Refused, as a save is, once the spool's file
    /// is gone: answered, the deletion was undone at the next start.
    pub async fn delete_record(&self, kind: &'static str, key: &str) -> Result<bool, SpoolError> {
        self.still_there()?;
        let key = key.to_owned();
        self.call(move |t| {
            t.execute("DELETE FROM records WHERE kind = ? AND key = ?", params![kind, key]).map(|n| n > 0)
        })
        .await
    }

    /// Deletes every record of `kind`; how many (refused once the spool's file is gone).
    pub async fn delete_records(&self, kind: &'static str) -> Result<usize, SpoolError> {
        self.still_there()?;
        self.call(move |t| t.execute("DELETE FROM records WHERE kind = ?", [kind])).await
    }

    /// Rewrites the records of `kind` under `keys` in one transaction: `change` is given each
    /// record there is and answers its new text, or `None` to leave it. How many changed.
    /// Refused, as a save is, once the spool's file is gone. (A clear marks thousands of ended
    /// sessions' records: one write each cost a second at 5,000.)
    pub async fn change_records(
        &self,
        kind: &'static str,
        keys: Vec<String>,
        change: impl Fn(&str) -> Option<String> + Send + 'static,
    ) -> Result<usize, SpoolError> {
        self.still_there()?;
        self.call(move |t| {
            let mut changed = 0;
            for key in keys {
                let Some(record) = record_in(t, kind, &key)? else { continue };
                let Some(record) = change(&record) else { continue };
                t.prepare_cached("UPDATE records SET record = ? WHERE kind = ? AND key = ?")?
                    .execute(params![record, kind, key])?;
                changed += 1;
            }
            Ok(changed)
        })
        .await
    }

    /// The record of `kind` under exactly `key`, if any.
    pub async fn record(&self, kind: &'static str, key: &str) -> Result<Option<String>, SpoolError> {
        let key = key.to_owned();
        self.read(move |c| record_in(c, kind, &key)).await
    }

    /// The records of `kind` whose key starts with `prefix`, by key.
    pub async fn records(&self, kind: &'static str, prefix: &str) -> Result<Vec<(String, String)>, SpoolError> {
        let prefix = prefix.to_owned();
        self.read(move |c| {
            let mut stmt = c.prepare_cached(
                "SELECT key, record FROM records WHERE kind = ?1 AND substr(key, 1, length(?2)) = ?2 ORDER BY key",
            )?;
            let rows = stmt.query_map(params![kind, prefix], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect()
        })
        .await
    }

    /// Deletes the records of `kind` whose JSON `at` (seconds since the epoch) is before `before`,
    /// but those whose JSON `bank` still has items waiting; how many. (A client's operation id
    /// forgotten while its retain was still queued (a week's outage, one start with the clock
    /// ahead) let a resend be queued again, and stored twice: review63 #7.)
    pub async fn forget_records_older_than(&self, kind: &'static str, before: u64) -> Result<usize, SpoolError> {
        self.call(move |t| {
            t.execute(
                "DELETE FROM records WHERE kind = ? AND json_extract(record, '$.at') < ?
                 AND NOT EXISTS (SELECT 1 FROM items WHERE items.bank = json_extract(records.record, '$.bank'))",
                params![kind, before as i64],
            )
        })
        .await
    }

    /// Deletes the records of `kind` for which the SQL condition `of` holds (over the column
    /// `record`), but the `most` of them whose JSON `at` is latest; how many went.
    pub async fn keep_newest_records(
        &self,
        kind: &'static str,
        of: &'static str,
        most: usize,
    ) -> Result<usize, SpoolError> {
        self.call(move |t| {
            t.execute(
                &format!(
                    "DELETE FROM records WHERE kind = ?1 AND ({of}) AND key NOT IN (
                        SELECT key FROM records WHERE kind = ?1 AND ({of})
                        ORDER BY json_extract(record, '$.at') DESC LIMIT ?2)"
                ),
                params![kind, most as i64],
            )
        })
        .await
    }

    /// Every saved session record.
    pub async fn sessions(&self) -> Result<Vec<(String, String)>, SpoolError> {
        self.read(|c| {
            let mut stmt = c.prepare("SELECT id, record FROM sessions")?;
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect()
        })
        .await
    }
}

/// The record of `kind` under `key` (in a job's transaction, or a read's).
pub(super) fn record_in(c: &rusqlite::Connection, kind: &str, key: &str) -> rusqlite::Result<Option<String>> {
    c.prepare_cached("SELECT record FROM records WHERE kind = ? AND key = ?")?
        .query_row(params![kind, key], |r| r.get(0))
        .optional()
}

/// Saves (replacing) a session's record within `t`.
pub(super) fn save_session_in(t: &rusqlite::Transaction<'_>, id: &str, record: &str) -> rusqlite::Result<()> {
    t.execute(
        "INSERT INTO sessions (id, record) VALUES (?, ?) ON CONFLICT(id) DO UPDATE SET record = excluded.record",
        params![id, record],
    )
    .map(|_| ())
}
