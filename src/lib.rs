//! mneme: a local memory daemon for AI coding agents.
//!
//! Module map (ARCHITECTURE.md traces a retain and a recall through them):
//! - [`daemon`]: the axum router, auth (token, loopback rules, the web view's cookie), routes, the
//!   accept loop, startup and the drain on shutdown; [`daemon::api`] is the /v1 wire contract.
//! - [`session`]: agent-session semantics (scopes, tools, automatic recall and retain, compaction).
//! - [`queue`]: the durable retain queue (batching, delivery, retries, dead letters).
//! - [`spool`]: the daemon's own SQLite database: queued items, dead letters, notices, sessions
//!   and the Hindsight API's records, written by one thread with group commit.
//! - [`hindsight_api`]: mneme speaking Hindsight's API at `/hindsight`.
//! - [`state`]: the settings in force and the active backend, owned together, replaced as a whole.
//! - [`config`]: settings, their defaults, file + environment loading and validation.
//! - [`reload`]: watching the config file and applying it live (backend switches included).
//! - [`backends`]: building the configured [`mneme_core::MemoryBackend`].
//! - [`classify`]: telling meta and compaction requests from work.
//! - [`notices`], [`metrics`]: what users are told (stored, live over SSE) and Prometheus counters.
//! - [`cli`]: the `mneme` commands; all but `serve` and `config` talk to the daemon over HTTP.
//! - [`files`], [`ids`], [`lock`]: storage-dir problems, random ids and secrets, lock helpers.
/// `eprintln!` that does not panic when standard error cannot be written (its reader gone: `mneme
/// status 2>&1 | head -1`): a command ends as it would have, with its exit code, and a hook still
/// answers its agent (the panic was exit 101; review109 #1).
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod backends;
pub mod classify;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod files;
pub mod hindsight_api;
pub mod ids;
pub mod json_text;
pub mod lock;
pub mod metrics;
pub mod notices;
pub mod owned_path;
pub mod queue;
pub mod reload;
pub mod session;
pub mod spool;
pub mod state;
