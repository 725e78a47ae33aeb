//! mneme: a local memory daemon for AI coding agents.
//!
//! Module map:
//! - [`config`]: settings, their defaults, file + environment loading and validation.
pub mod backends;
pub mod classify;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod files;
pub mod hindsight_api;
pub mod ids;
pub mod lock;
pub mod metrics;
pub mod notices;
pub mod queue;
pub mod reload;
pub mod session;
