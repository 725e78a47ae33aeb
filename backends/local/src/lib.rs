//! mneme-local: memories in an embedded SQLite database with FTS5/BM25 recall.
//!
//! - [`store`]: the synchronous store (schema, retain, recall, clear, stats) on a rusqlite connection.
//! - `browse`: newest-first listing, one memory with its passages, forgetting a memory or document.
//! - [`schema`]: embedded migrations, applied on open.
//! - [`error`]: why the store could not be opened, and how SQL failures map to retry or not.
//! - `dedupe`: the writer's in-memory map from content to rows, for storing identical content once.
//! - [`fts`]: turns any user text into a safe FTS5 query.
//! - [`Thesaurus`]: the words a query's words may also match (built in, and a user's own lines).
//! - `writer`: the thread that owns the writing connection (lower CPU priority, shared commits).
//! - [`LocalBackend`]: the async [`mneme_core::MemoryBackend`], running the store off the async workers.

mod backend;
mod browse;
mod dedupe;
mod embedding;
mod embedding_batches;
pub mod error;
pub mod fts;
mod fusion;
mod neighbourhood;
pub mod passages;
mod recall;
mod recent_vectors;
mod retain;
mod rows;
pub mod schema;
pub mod store;
mod thesaurus;
mod vectors;
mod writer;

pub use backend::{LocalBackend, LocalConfig, Upgrade};
pub use embedding::{EmbedderChoice, OutageNotices};
pub use error::OpenError;
pub use mneme_embed::OpenAiConfig;
pub use recall::RecallMode;
pub use thesaurus::{Thesaurus, ThesaurusError};

/// Checks a local store file without changing it: that it is a memory database this mneme can
/// read and that SQLite finds it sound. Returns how many memories it holds.
pub fn check(path: &std::path::Path) -> Result<u64, OpenError> {
    store::Store::check(path)
}

/// Refuses a local store file whose header is not an SQLite database's, without SQLite opening
/// it (which may delete the log beside it). Only where this process has no connection to the
/// file open: a daemon's start before it opens its store, `mneme doctor` (see
/// `store::check_header` for why).
pub fn check_header(path: &std::path::Path) -> Result<(), OpenError> {
    store::check_header(path)
}
