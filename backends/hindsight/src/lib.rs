//! mneme-hindsight: the `hindsight` backend, a client of a Hindsight memory server (API v1, 1.1.0).
//!
//! - [`HindsightConfig`]: where the server is, the (secret) token, missions, rate limit, timeouts.
//! - [`HindsightBackend`]: the [`mneme_core::MemoryBackend`] over reqwest, with a governor rate
//!   limit shared by every session (it waits, it never drops).
//! - `browse`: listing a bank, one memory unit, deleting a document (the web view, `mneme forget`).
//! - [`errors`]: HTTP outcomes → transient or permanent [`mneme_core::BackendError`] with a readable reason.
//! - [`wire`]: the request and response bodies of the calls mneme makes.
//! - `operations`: waiting until an asynchronous retain is stored; cancelling the queued ones
//!   before a clear or a forget.
//! - `redelete`: deleting again, once they finish, what retains the server was already running
//!   at a forget or a clear store after it.
//! - `parts`: a delivery cut into retains Hindsight runs in order and answers once (one document
//!   each, all asynchronous, each with a stable operation id, sent once the one before is stored).

mod backend;
mod browse;
pub mod errors;
mod limiter;
mod operations;
mod parts;
mod redelete;
pub mod wire;

pub use backend::{operation_id, HindsightBackend, HindsightConfig, Secret};
