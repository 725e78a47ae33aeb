//! The notices users see, kept in the spool so they survive restarts.

use rusqlite::params;

use super::{Spool, SpoolError};

/// A notice row.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct NoticeRow {
    /// Increasing id.
    pub id: i64,
    /// RFC 3339 UTC.
    pub at: String,
    /// `info`, `warning` or `error`.
    pub level: String,
    /// Who raised it (a backend name, `config`, `queue`).
    pub source: String,
    /// The session it concerns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// For the user.
    pub message: String,
}

impl Spool {
    /// Stores a notice, keeping the newest `keep`; returns it with its id.
    pub async fn add_notice(&self, mut notice: NoticeRow, keep: usize) -> Result<NoticeRow, SpoolError> {
        self.call(move |t| {
            t.execute(
                "INSERT INTO notices (at, level, source, session_id, message) VALUES (?, ?, ?, ?, ?)",
                params![notice.at, notice.level, notice.source, notice.session_id, notice.message],
            )?;
            notice.id = t.last_insert_rowid();
            t.execute("DELETE FROM notices WHERE id <= ?", [notice.id - keep as i64])?;
            Ok(notice)
        })
        .await
    }

    /// Notices with an id above `after`, oldest first.
    pub async fn notices_after(&self, after: i64, limit: usize) -> Result<Vec<NoticeRow>, SpoolError> {
        self.call(move |t| {
            let mut stmt = t.prepare_cached(
                "SELECT id, at, level, source, session_id, message FROM notices WHERE id > ? ORDER BY id LIMIT ? + 0",
            )?;
            let rows = stmt.query_map(params![after, limit as i64], |r| {
                Ok(NoticeRow {
                    id: r.get(0)?,
                    at: r.get(1)?,
                    level: r.get(2)?,
                    source: r.get(3)?,
                    session_id: r.get(4)?,
                    message: r.get(5)?,
                })
            })?;
            rows.collect()
        })
        .await
    }

    /// The newest notice id (0 when none).
    pub async fn last_notice_id(&self) -> Result<i64, SpoolError> {
        self.call(|t| t.query_row("SELECT coalesce(max(id), 0) FROM notices", [], |r| r.get(0))).await
    }
}
