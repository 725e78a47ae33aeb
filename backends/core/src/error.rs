//! The one error type backends return across the trait.

use std::time::Duration;

/// A backend failure, classified so the retain queue knows whether to retry.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BackendError {
    /// Worth retrying: connection refused, timeout, 408, 429, 5xx, a busy database.
    #[error("{reason}")]
    Transient {
        /// Human-readable cause.
        reason: String,
        /// How long the server asked us to wait (`Retry-After`), if it said.
        retry_after: Option<Duration>,
    },
    /// No answer at all: the connection was refused or the host is unreachable. Worth retrying,
    /// and like a full disk it does not use up a batch's attempts: an outage is not the batch's
    /// fault, however long it lasts, so it moves nothing to the dead letters.
    #[error("{reason}")]
    Unreachable {
        /// Human-readable cause.
        reason: String,
    },
    /// The server answered that it cannot serve now (429, 503: overloaded, restarting), or has
    /// not finished work it accepted. Worth retrying, and like [`BackendError::Unreachable`]
    /// it uses up no attempts: an outage that answers is still an outage (its database restarting
    /// dead-lettered every batch within two minutes).
    #[error("{reason}")]
    Unavailable {
        /// Human-readable cause.
        reason: String,
        /// How long the server asked us to wait (`Retry-After`), if it said.
        retry_after: Option<Duration>,
    },
    /// Retrying will not help: bad request, authentication, a bank id the server rejects.
    #[error("{reason}")]
    Permanent {
        /// Human-readable cause.
        reason: String,
    },
    /// The store's disk is full: worth retrying once there is room again. Unlike other
    /// transient faults it does not use up a batch's attempts, so a long episode moves nothing
    /// to the dead letters.
    #[error("{reason}")]
    StorageFull {
        /// Human-readable cause.
        reason: String,
    },
    /// The backend cannot do this at all (reflect without an LLM).
    #[error("{0}")]
    Unsupported(String),
    /// What was asked for is not stored (a memory id, a document).
    #[error("{0}")]
    NotFound(String),
    /// The request does not make sense to this backend (a cursor it did not hand out).
    #[error("{0}")]
    Invalid(String),
    /// A retain of which these items were stored before the rest failed as `error` says (a
    /// server taking a batch a request at a time): they are delivered. Put back with the rest,
    /// an append among them was stored a second time when the batch was sent again under
    /// another name (`mneme retry` of its dead letters).
    #[error("{error}")]
    PartlyStored {
        /// The ids of the items stored.
        stored: Vec<String>,
        /// Why the rest failed.
        error: Box<BackendError>,
    },
}

impl BackendError {
    /// A transient error without a server-given delay.
    pub fn transient(reason: impl Into<String>) -> Self {
        Self::Transient { reason: reason.into(), retry_after: None }
    }

    /// A permanent error.
    pub fn permanent(reason: impl Into<String>) -> Self {
        Self::Permanent { reason: reason.into() }
    }

    /// Why it failed: itself, or what failed after a part was stored (see
    /// [`BackendError::PartlyStored`]).
    pub fn cause(&self) -> &BackendError {
        match self {
            Self::PartlyStored { error, .. } => error.cause(),
            e => e,
        }
    }

    /// The ids of the items stored before it failed (see [`BackendError::PartlyStored`]).
    pub fn stored_before(&self) -> &[String] {
        match self {
            Self::PartlyStored { stored, .. } => stored,
            _ => &[],
        }
    }

    /// Whether a retry may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(
            self.cause(),
            Self::Transient { .. } | Self::StorageFull { .. } | Self::Unreachable { .. } | Self::Unavailable { .. }
        )
    }

    /// Whether this is an outage (no answer, or an answer that the server cannot serve now),
    /// which uses up none of a batch's attempts however long it lasts.
    pub fn is_outage(&self) -> bool {
        matches!(self.cause(), Self::Unreachable { .. } | Self::Unavailable { .. })
    }

    /// Whether the backend gave no answer at all (see [`BackendError::Unreachable`]).
    pub fn is_unreachable(&self) -> bool {
        matches!(self.cause(), Self::Unreachable { .. })
    }

    /// Whether the store's disk is full.
    pub fn is_storage_full(&self) -> bool {
        matches!(self.cause(), Self::StorageFull { .. })
    }

    /// The server-requested delay before a retry, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self.cause() {
            Self::Transient { retry_after, .. } | Self::Unavailable { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}
