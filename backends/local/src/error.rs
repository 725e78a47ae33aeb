//! What the local store's failures are, and how they reach the daemon as a [`BackendError`].

use mneme_core::BackendError;

/// Why the local store could not be opened or checked.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// SQLite refused the file (not a database, no permission …).
    #[error(transparent)]
    Sql(#[from] rusqlite::Error),
    /// The file was written by a newer mneme.
    #[error("database schema version {found} is newer than this mneme supports ({known})")]
    NewerSchema {
        /// The file's schema version.
        found: usize,
        /// The newest this mneme knows.
        known: usize,
    },
    /// The file is of an earlier mneme's schema, and this opening may not upgrade it.
    #[error(
        "database schema version {found} is older than this mneme's ({known}), and is not upgraded while a daemon may be running on it"
    )]
    OlderSchema {
        /// The file's schema version.
        found: usize,
        /// The newest this mneme knows.
        known: usize,
    },
    /// SQLite's check finds the file damaged.
    #[error("SQLite finds it damaged: {0}")]
    Damaged(String),
    /// The file is there but empty: truncated since mneme wrote it.
    #[error("{}", mneme_core::database_file::EMPTIED)]
    Emptied,
    /// The file's header is not an SQLite database's: overwritten or replaced.
    #[error("{0}")]
    Overwritten(String),
    /// A thread the store needs could not be started.
    #[error("cannot start the local store's {what} thread: {source}")]
    Thread {
        /// Which thread.
        what: &'static str,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },
}

impl From<OpenError> for BackendError {
    fn from(e: OpenError) -> Self {
        match e {
            e @ (OpenError::Sql(_)
            | OpenError::NewerSchema { .. }
            | OpenError::OlderSchema { .. }
            | OpenError::Damaged(_)
            | OpenError::Emptied
            | OpenError::Overwritten(_)) => BackendError::permanent(e.to_string()),
            e @ OpenError::Thread { .. } => BackendError::transient(e.to_string()),
        }
    }
}

/// A connection that could not be opened while the store runs (a reader): SQLite's failures are
/// classified as a statement's are (busy or locked may pass).
pub(crate) fn open_failed(e: OpenError) -> BackendError {
    match e {
        OpenError::Sql(e) => sql_error(e),
        other => other.into(),
    }
}

/// A failed statement: busy, locked, full or I/O failures may pass; anything else will not.
pub(crate) fn sql_error(e: rusqlite::Error) -> BackendError {
    use rusqlite::ErrorCode::*;
    match &e {
        rusqlite::Error::SqliteFailure(f, _) if f.code == DiskFull => {
            BackendError::StorageFull { reason: format!("local store: {e}") }
        }
        rusqlite::Error::SqliteFailure(f, _)
            if matches!(f.code, DatabaseBusy | DatabaseLocked | SystemIoFailure | CannotOpen | OutOfMemory) =>
        {
            BackendError::transient(format!("local store: {e}"))
        }
        _ => BackendError::permanent(format!("local store: {e}")),
    }
}
