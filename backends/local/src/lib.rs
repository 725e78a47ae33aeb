//! mneme-local: memories in an embedded SQLite database with FTS5/BM25 recall.
//!
//! - [`store`]: the synchronous store (schema, retain, recall, clear, stats) on a rusqlite connection.
//! - [`schema`]: embedded migrations, applied on open.
//! - `dedupe`: the writer's in-memory map from content to rows, for storing identical content once.
//! - [`fts`]: turns any user text into a safe FTS5 query.
//! - `writer`: the thread that owns the writing connection (lower CPU priority, shared commits).
//! - [`LocalBackend`]: the async [`mneme_core::MemoryBackend`], running the store off the async workers.

mod backend;
mod dedupe;
pub mod fts;
pub mod schema;
pub mod store;
mod writer;

pub use backend::{LocalBackend, LocalConfig};
