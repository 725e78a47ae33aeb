//! mneme-core: what every memory backend shares.
//!
//! - [`backend`]: the [`MemoryBackend`] trait the daemon drives.
//! - [`types`]: scopes, items, queries and results passed across the trait.
//! - [`browse`]: listing, showing and forgetting single memories (the web view, `mneme forget`).
//! - [`error`]: [`BackendError`], which tells transient faults from permanent ones.
//! - [`text`]: the text utilities (memory-tag stripping, recall queries, retention transcripts).
//! - [`off`]: the `off` backend, which stores nothing.
//! - [`time`]: the few timestamp formats the contract fixes.
//! - [`transfer`]: how an import is cut into requests, a document never split.
//! - [`secret`]: [`Secret`], a string that never shows in logs or `Debug` output.
//! - [`database_file`]: whether a spool's or store's file was emptied since mneme wrote it.

pub mod backend;
pub mod browse;
pub mod database_file;
pub mod error;
pub mod off;
pub mod repeats;
pub mod secret;
pub mod text;
pub mod time;
pub mod transfer;
pub mod types;

/// What a project's tag starts with (`memory.scoping = "per-project-tagged"`: `project:<label>`).
pub const PROJECT_TAG_PREFIX: &str = "project:";

/// The header every answer of a mneme daemon carries, naming its process: a backend that finds
/// its own daemon's value in a server's answer is talking to itself.
pub const INSTANCE_HEADER: &str = "x-mneme-instance";

/// This process's instance id (random, 16 hex digits), for [`INSTANCE_HEADER`].
pub fn instance_id() -> &'static str {
    use std::hash::{BuildHasher, Hasher};
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        format!("{:016x}", h.finish())
    })
}

pub use backend::MemoryBackend;
pub use browse::{BankCount, BrowsePage, BrowseQuery, Forget, Forgotten, MemoryDetail};
pub use error::BackendError;
pub use off::OffBackend;
pub use secret::Secret;
pub use types::*;
