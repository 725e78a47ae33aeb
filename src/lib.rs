//! mneme: a local memory daemon for AI coding agents.
//!
//! Module map:
//! - [`config`]: settings, their defaults, file + environment loading and validation.
pub mod config;
